"""The log verifier: read a topic back from Redis and check G1, G2, G5 and G6 over all of it.

``fencing demo`` runs producers under real faults and then asks this module whether the
guarantees held. It reads the raw storage (topic and partition metadata with HGETALL, every
stream entry with XRANGE paging, the producer row's token), never through
:class:`~fencing.Reader`: the reader raises on some corruptions, and a verifier must report
*every* violation, not stop at the first. It only reads; it never writes.

>>> from fencing.verify import Attempt, verify_log
>>> sent = [Attempt(b"v1", partition=0, outcome="acked", offset=0, epoch=1)]
>>> report = verify_log(client, "orders", attempts=sent)             # doctest: +SKIP
>>> report.ok, report.segments[0].epoch                                # doctest: +SKIP
(True, 1)
>>> print(report.summary())                                           # doctest: +SKIP

What is checked, per partition (each violation carries its partition and, where it is about
one record, its offset):

- **G6** every entry ID is ``0-N``; the entries are exactly offsets ``start`` to ``next - 1``
  of the partition metadata (no gap, nothing past ``next``, nothing below ``start``); every
  entry has its ``e``, ``p`` and ``v`` fields (a malformed entry is reported and skipped).
- **G1** (``exclusive=True``) along the log epochs never decrease, each epoch is one
  contiguous run written by one producer, and no record carries an epoch above the
  partition's current one (the producer row's token).
- **G2** no value of a send that raised ``ProducerFenced`` is in the log; no record of an
  epoch after a later epoch began; an acknowledged record carries the epoch it was acked with.
- **G5** (``unique_values=True``) no value appears twice; every acknowledged value is in the
  log exactly once, at the offset it was acknowledged with (else it is counted in ``lost``),
  and a send whose outcome was unknown landed at most once.

Verify a quiet log: records appended while the verifier pages through a partition show up
as entries past the ``next`` it read first.
"""

from __future__ import annotations

# One job per module: _model (attempts, violations, segments), _reading (the log read back
# from Redis), _log_checks (G6 and G1 along each partition's log), _value_checks (G2 and G5
# over the values), _verifier (both checks into one report), _report (LogReport), _values
# (stored fields decoded and shown), _client (the one reach into a Client), _verify_log.
from ._model import GUARANTEES as GUARANTEES
from ._model import OUTCOMES as OUTCOMES
from ._model import Attempt, Segment, Violation
from ._report import LogReport
from ._verify_log import verify_log

__all__ = ["Attempt", "LogReport", "Segment", "Violation", "verify_log"]

# The public names say they live here, as they always did (help(), reprs, pickles).
for _public in (Attempt, LogReport, Segment, Violation, verify_log):
    _public.__module__ = __name__
del _public
