"""``verify_log``: check the arguments, then read every partition of a topic back and check it.

>>> report = verify_log(client, "orders", attempts=attempts)          # doctest: +SKIP
>>> report.ok or print(report.summary())                              # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._keys import validate_name
from .._validate import check_int
from ..errors import InvalidArgument
from ._client import driver_and_budget
from ._model import OUTCOMES, Attempt
from ._reading import partition_count, scan_partition
from ._report import LogReport
from ._verifier import Verifier

if TYPE_CHECKING:
    from .._sync.client import Client


def verify_log(
    client: Client,
    topic: str,
    *,
    attempts: Iterable[Attempt] = (),
    exclusive: bool = True,
    unique_values: bool = True,
    page: int = 10_000,
) -> LogReport:
    """Read every partition of ``topic`` straight from Redis and check G1, G2, G5 and G6.

    ``attempts`` are what the writers saw (acked, fenced, unknown sends); ``exclusive``
    says the partitions were written only by exclusive producers (G1 applies);
    ``unique_values`` that every value written is unique (a repeat is a duplicate);
    ``page`` is the XRANGE page size. Raises :class:`~fencing.UnknownTopic` if the topic
    does not exist. Memory: the values seen (to find duplicates) and the segments.

    >>> report = verify_log(client, "orders", attempts=attempts)      # doctest: +SKIP
    >>> report.ok or print(report.summary())                          # doctest: +SKIP
    """
    name = validate_name("topic", topic)
    page = check_int("page", page, minimum=1)
    tried = list(attempts)
    for a in tried:
        if not isinstance(a, Attempt):
            raise InvalidArgument(f"attempts must be fencing.verify.Attempt objects, got {a!r}")
        if a.outcome not in OUTCOMES:
            raise InvalidArgument(
                f"attempt outcome {a.outcome!r} is not one of {', '.join(OUTCOMES)}"
            )
    driver, budget = driver_and_budget(client)
    partitions = partition_count(driver, budget, client.keys.topic_meta(name), name)
    for a in tried:
        if not 0 <= a.partition < partitions:
            raise InvalidArgument(
                f"an attempt names partition {a.partition}, but topic {name!r} has "
                f"partitions 0 to {partitions - 1}"
            )
    check = Verifier(name, partitions, tried, exclusive=exclusive, unique_values=unique_values)
    for p in range(partitions):
        scan_partition(driver, budget, client.keys.partition(name, p), page, check)
    return check.report()
