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

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._keys import PartitionKeys, validate_name
from ._protocol.base import Command, ReadCall
from ._text import text
from ._validate import check_int
from .errors import FencingError, InvalidArgument, UnknownTopic, WrongKeyType

if TYPE_CHECKING:
    from ._retry import RetryBudget
    from ._sync.client import Client
    from ._sync.driver import Driver

__all__ = ["Attempt", "LogReport", "Segment", "Violation", "verify_log"]

OUTCOMES = ("acked", "fenced", "unknown")
GUARANTEES = ("G1", "G2", "G5", "G6")
# A value's place in the log packed in one int: (offset + 1) << 17 | partition, 0 meaning
# "no offset" (an entry whose ID is not 0-N). Millions of tuples would cost far more.
_PARTITION_BITS = 17  # topics have at most 100,000 partitions
_PARTITION_MASK = (1 << _PARTITION_BITS) - 1
_SHOW_LOCATIONS = 5


@dataclass(frozen=True, slots=True)
class Attempt:
    """What a writer said happened to one send (the demo collects these from its workers).

    ``outcome`` is "acked" (``offset`` and ``epoch`` from the returned RecordMetadata),
    "fenced" (the send raised ``ProducerFenced``) or "unknown" (an error left the outcome
    unknown). ``value`` should be unique per attempt.

    >>> Attempt(b"w1-17", partition=0, outcome="acked", offset=41, epoch=3)
    Attempt(value=b'w1-17', partition=0, outcome='acked', offset=41, epoch=3)
    """

    value: bytes
    partition: int
    outcome: str
    offset: int | None = None
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken guarantee: where (partition, offset when about one record) and what.

    >>> str(Violation("G6", 0, 7, "offset 7 missing"))
    'G6 partition 0 offset 7: offset 7 missing'
    """

    guarantee: str
    partition: int
    offset: int | None
    message: str

    def __str__(self) -> str:
        where = "" if self.offset is None else f" offset {self.offset}"
        return f"{self.guarantee} partition {self.partition}{where}: {self.message}"


@dataclass(frozen=True, slots=True)
class Segment:
    """A maximal run of records of one (epoch, producer) along a partition's log.

    >>> Segment(0, epoch=2, producer_id="9", first_offset=312, last_offset=540, records=229)
    Segment(partition=0, epoch=2, producer_id='9', first_offset=312, last_offset=540, records=229)
    """

    partition: int
    epoch: int
    producer_id: str
    first_offset: int
    last_offset: int
    records: int


@dataclass(frozen=True)
class LogReport:
    """What :func:`verify_log` found. ``ok`` when no guarantee was broken.

    >>> report = verify_log(client, "orders")                         # doctest: +SKIP
    >>> report.ok, report.records, report.duplicates                  # doctest: +SKIP
    (True, 1234, 0)
    """

    topic: str
    partitions: int
    records: int
    segments: tuple[Segment, ...]
    duplicates: int
    interleavings: int
    fenced_attempts: int
    lost: int
    violations: tuple[Violation, ...]
    #: Fenced attempts whose value is in the log (each one is also a G2 violation).
    fenced_landed: int = 0
    #: Whether G1 was checked (``exclusive=True``).
    exclusive: bool = True

    @property
    def ok(self) -> bool:
        """True when no violation was found."""
        return not self.violations

    @property
    def checks(self) -> dict[str, str]:
        """Each guarantee's verdict: "ok", "failed" or "not checked"."""
        failed = {v.guarantee for v in self.violations}
        out = {}
        for g in GUARANTEES:
            if g in failed:
                out[g] = "failed"
            elif g == "G1" and not self.exclusive:
                out[g] = "not checked"
            else:
                out[g] = "ok"
        return out

    def summary(self, max_segments: int = 20, max_violations: int = 100) -> str:
        """A human summary: segments per partition, counters, verdicts, then violations.

        At most ``max_segments`` segment lines per partition and ``max_violations``
        violation lines are printed (:meth:`to_dict` holds them all).
        """
        lines = [
            f"topic {self.topic}: {_count(self.partitions, 'partition')}, "
            f"{_count(self.records, 'record')}"
        ]
        by_partition: dict[int, list[Segment]] = {}
        for s in self.segments:
            by_partition.setdefault(s.partition, []).append(s)
        for p in range(self.partitions):
            segments = by_partition.get(p, [])
            lines.append(f"  partition {p}: {_count(len(segments), 'segment')}")
            shown = segments[:max_segments]
            ew = max((len(str(s.epoch)) for s in shown), default=0) + 2
            pw = max((len(s.producer_id) for s in shown), default=0) + 3
            ow = max((len(f"{s.first_offset}..{s.last_offset}") for s in shown), default=0) + 3
            for s in shown:
                lines.append(
                    f"    epoch {s.epoch:<{ew}}producer {s.producer_id:<{pw}}offsets "
                    f"{f'{s.first_offset}..{s.last_offset}':<{ow}}"
                    f"({_count(s.records, 'record')})"
                )
            if len(segments) > len(shown):
                lines.append(f"    ... {len(segments) - len(shown):,} more segments")
        landed = "none landed" if not self.fenced_landed else f"{self.fenced_landed:,} landed"
        lines.append(
            f"  duplicates {self.duplicates:,}, interleavings {self.interleavings:,}, "
            f"lost acknowledged {self.lost:,}, fenced attempts {self.fenced_attempts:,} "
            f"({landed})"
        )
        verdicts = {"ok": "ok", "failed": "FAILED", "not checked": "not checked"}
        counts = {g: sum(1 for v in self.violations if v.guarantee == g) for g in GUARANTEES}
        lines.append(
            "  "
            + "  ".join(
                f"{g} {verdicts[c]}" + (f" ({counts[g]:,})" if c == "failed" else "")
                for g, c in self.checks.items()
            )
        )
        if self.violations:
            lines.append(f"  {_count(len(self.violations), 'violation')}:")
            lines.extend(f"    {v}" for v in self.violations[:max_violations])
            if len(self.violations) > max_violations:
                lines.append(f"    ... and {len(self.violations) - max_violations:,} more")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-ready data (for ``--json``): plain str, int, bool, list, dict.

        >>> json.dumps(report.to_dict())                                # doctest: +SKIP
        """
        return {
            "topic": self.topic,
            "partitions": self.partitions,
            "records": self.records,
            "ok": self.ok,
            "checks": self.checks,
            "duplicates": self.duplicates,
            "interleavings": self.interleavings,
            "fenced_attempts": self.fenced_attempts,
            "fenced_landed": self.fenced_landed,
            "lost": self.lost,
            "segments": [dataclasses.asdict(s) for s in self.segments],
            "violations": [dataclasses.asdict(v) for v in self.violations],
        }


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
    budget = client._budget_default()
    driver = client._driver(budget.timeout)
    partitions = _partition_count(driver, budget, client.keys.topic_meta(name), name)
    for a in tried:
        if not 0 <= a.partition < partitions:
            raise InvalidArgument(
                f"an attempt names partition {a.partition}, but topic {name!r} has "
                f"partitions 0 to {partitions - 1}"
            )
    check = _Verifier(name, partitions, tried, exclusive=exclusive, unique_values=unique_values)
    for p in range(partitions):
        _scan_partition(driver, budget, client.keys.partition(name, p), page, check)
    return check.report()


# -- reading ------------------------------------------------------------------------------------


def _read(driver: Driver, budget: RetryBudget, *commands: Command) -> list[Any]:
    """Plain read commands in one pipeline, retried within the budget like every read."""
    return driver.read(ReadCall(commands=commands, parse=lambda replies: replies), budget)


def _as_dict(reply: Any) -> dict[bytes, bytes]:
    """A hash or stream-entry field list as a dict (RESP2 flat list or RESP3 map)."""
    if isinstance(reply, dict):
        return {_raw(k): _raw(v) for k, v in reply.items()}
    items = list(reply or ())
    return {_raw(k): _raw(v) for k, v in zip(items[::2], items[1::2], strict=False)}


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def _partition_count(driver: Driver, budget: RetryBudget, key: str, topic: str) -> int:
    (kind,) = _read(driver, budget, ("TYPE", key))
    kind = text(kind)
    if kind == "none":
        raise UnknownTopic(
            f"topic {topic!r} does not exist in this namespace: check the topic name and the "
            "client's namespace",
            topic=topic,
        )
    if kind != "hash":
        raise WrongKeyType(
            f"key {key!r} holds a Redis {kind}, not a topic's metadata: another program uses "
            "this name",
            key=key,
            key_type=kind,
        )
    (meta,) = _read(driver, budget, ("HGETALL", key))
    count = _int(_as_dict(meta).get(b"partitions"))
    if count is None or not 1 <= count <= _PARTITION_MASK:
        raise FencingError(
            f"topic {topic!r} has no valid partition count in {key!r}: its metadata is "
            "damaged, so its partitions cannot be found"
        )
    return count


def _scan_partition(
    driver: Driver, budget: RetryBudget, pk: PartitionKeys, page: int, check: _Verifier
) -> None:
    types = _read(driver, budget, *(("TYPE", k) for k in (pk.meta, pk.stream, pk.owner)))
    meta_type, stream_type, owner_type = (text(t) for t in types)
    commands: list[Command] = []
    if meta_type == "hash":
        commands.append(("HGETALL", pk.meta))
    if owner_type == "hash":
        commands.append(("HGET", pk.owner, "token"))
    replies = iter(_read(driver, budget, *commands)) if commands else iter(())
    meta = _as_dict(next(replies)) if meta_type == "hash" else None
    token = next(replies) if owner_type == "hash" else None
    check.begin(pk.partition, meta, meta_type, token)
    if stream_type not in ("stream", "none"):
        check.violation(
            "G6", None, f"the log key holds a Redis {stream_type}, not a stream: no records"
        )
    elif stream_type == "stream":
        low: bytes = b"-"
        while True:
            (entries,) = _read(driver, budget, ("XRANGE", pk.stream, low, "+", "COUNT", page))
            for entry_id, raw_fields in entries:
                # The client's own connections never decode replies: IDs and fields are
                # bytes; RESP3 may hand the fields over as a map.
                fields = (
                    raw_fields
                    if isinstance(raw_fields, dict)
                    else dict(zip(raw_fields[::2], raw_fields[1::2], strict=False))
                )
                check.entry(entry_id, fields)
            if len(entries) < page:
                break
            low = b"(" + _raw(entries[-1][0])
    check.end()


# -- checking ----------------------------------------------------------------------------------


def _int(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _offset_field(meta: dict[bytes, bytes], name: bytes) -> int | None:
    value = _int(meta.get(name))
    return None if value is None or value < 0 else value


def _offset(entry_id: bytes) -> int | None:
    """The offset an entry ID encodes (G6: 0-(offset+1)); None for any other shape."""
    ms, sep, seq = entry_id.partition(b"-")
    if sep and ms == b"0" and seq.isdigit() and int(seq) >= 1:
        return int(seq) - 1
    return None


def _pack(partition: int, offset: int | None) -> int:
    return ((0 if offset is None else offset + 1) << _PARTITION_BITS) | partition


def _unpack(loc: int) -> tuple[int, int | None]:
    offset = (loc >> _PARTITION_BITS) - 1
    return loc & _PARTITION_MASK, None if offset < 0 else offset


def _where(loc: int) -> str:
    p, o = _unpack(loc)
    return f"partition {p} " + ("(entry without an offset)" if o is None else f"offset {o}")


def _show(value: bytes) -> str:
    """A value for a one-line message: its text when printable, else hex; long ones cut."""
    try:
        decoded = value.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is not None and decoded.isprintable():
        return repr(decoded) if len(decoded) <= 40 else repr(decoded[:40]) + "..."
    return "0x" + value[:20].hex() + ("..." if len(value) > 20 else "")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _offsets(a: int, b: int) -> str:
    if a == b:
        return f"offset {a} (entry 0-{a + 1})"
    return f"offsets {a}..{b} (entries 0-{a + 1}..0-{b + 1})"


@dataclass
class _Run:
    epoch: int
    producer: str
    first: int
    last: int
    records: int = 1


@dataclass
class _Partition:
    """What the checks hold for the partition being scanned: O(epochs + segments)."""

    index: int
    start: int | None
    next: int | None
    token: int
    expect: int | None
    run: _Run | None = None
    max_epoch: int | None = None
    epoch_first: dict[int, int] = dataclasses.field(default_factory=dict)
    epoch_producers: dict[int, set[str]] = dataclasses.field(default_factory=dict)


class _Verifier:
    """Fed the entries of each partition in log order; builds the report at the end."""

    def __init__(
        self,
        topic: str,
        partitions: int,
        attempts: list[Attempt],
        *,
        exclusive: bool,
        unique_values: bool,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.attempts = attempts
        self.exclusive = exclusive
        self.unique_values = unique_values
        self.violations: list[Violation] = []
        self.segments: list[Segment] = []
        self.records = 0
        self.interleavings = 0
        self.starts: dict[int, int] = {}
        self.fenced = {a.value for a in attempts if a.outcome == "fenced"}
        self.fenced_seen: set[bytes] = set()
        self.acked = {a.value for a in attempts if a.outcome == "acked"}
        # Values that must appear at most once even when unique_values is off.
        self.tracked = self.acked | {a.value for a in attempts if a.outcome == "unknown"}
        self.first: dict[bytes, int] = {}
        self.extra: dict[bytes, list[int]] = {}
        self.epoch_at: dict[int, int] = {}  # location of an acked value -> its record's epoch
        self.part: _Partition | None = None

    def violation(self, guarantee: str, offset: int | None, message: str) -> None:
        assert self.part is not None
        self.violations.append(Violation(guarantee, self.part.index, offset, message))

    # -- per partition --------------------------------------------------------------------

    def begin(
        self, partition: int, meta: dict[bytes, bytes] | None, meta_type: str, token: Any
    ) -> None:
        start = nxt = None
        self.part = part = _Partition(partition, None, None, _int(token) or 0, None)
        if meta is None:
            what = "missing" if meta_type == "none" else f"a Redis {meta_type}, not a hash"
            self.violation("G6", None, f"the partition metadata is {what}: offsets unknown")
        else:
            start, nxt = _offset_field(meta, b"start"), _offset_field(meta, b"next")
            for field, value in ((b"start", start), (b"next", nxt)):
                if value is None:
                    self.violation(
                        "G6",
                        None,
                        f"partition metadata field {field.decode()!r} is "
                        f"{meta.get(field)!r}, not an offset",
                    )
            if start is not None and nxt is not None and nxt < start:
                self.violation(
                    "G6", None, f"partition metadata says next offset {nxt} < start {start}"
                )
                start = nxt = None
        part.start, part.next, part.expect = start, nxt, start
        if start is not None:
            self.starts[partition] = start

    def entry(self, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        self.records += 1
        offset = _offset(entry_id)
        if offset is None:
            self.violation(
                "G6",
                None,
                f"entry ID {entry_id.decode(errors='replace')} is not of the form "
                "0-N: offsets are stored as entries 0-(offset+1)",
            )
        else:
            self._place(offset)
        e, p, v = fields.get(b"e"), fields.get(b"p"), fields.get(b"v")
        epoch = _int(e)
        missing = [n for n, f in (("e", e), ("p", p), ("v", v)) if f is None]
        if missing or epoch is None:
            what = f"no field {', '.join(missing)}" if missing else f"epoch field e is {e!r}"
            self.violation(
                "G6", offset, f"malformed entry {entry_id.decode(errors='replace')}: {what}"
            )
        if offset is not None and epoch is not None and p is not None:
            self._writer(offset, epoch, p.decode(errors="replace"))
        if v is not None:
            self._value(v, offset, epoch)

    def end(self) -> None:
        part = self.part
        assert part is not None
        if part.run is not None:
            self._close(part.run)
        if part.next is not None and part.expect is not None and part.expect < part.next:
            self._gap(part.expect, part.next - 1)

    def _gap(self, a: int, b: int) -> None:
        part = self.part
        assert part is not None
        first = "" if a != part.start else f"; the first retained offset is {part.start}"
        self.violation("G6", a, f"{_offsets(a, b)} missing from the log{first}")

    def _place(self, offset: int) -> None:
        """G6: the entries are exactly offsets start .. next - 1, in order."""
        part = self.part
        assert part is not None
        if part.start is not None and offset < part.start:
            self.violation(
                "G6",
                offset,
                f"entry 0-{offset + 1} is below the first retained offset "
                f"{part.start} (a trim left it behind)",
            )
            return
        if part.expect is None:  # metadata unknown: follow the entries
            part.expect = offset
        if offset > part.expect and (part.next is None or part.expect < part.next):
            self._gap(part.expect, offset - 1 if part.next is None else min(offset, part.next) - 1)
        if part.next is not None and offset >= part.next:
            self.violation(
                "G6",
                offset,
                f"entry 0-{offset + 1} is past the partition's next offset "
                f"{part.next} (written around the append script)",
            )
        part.expect = offset + 1

    def _writer(self, offset: int, epoch: int, producer: str) -> None:
        """G1 (and G2 for records of an older epoch): runs of (epoch, producer)."""
        part = self.part
        assert part is not None
        run = part.run
        if run is not None and run.epoch == epoch and run.producer == producer:
            run.last, run.records = offset, run.records + 1
            return
        if run is not None:
            self._close(run)
        resumed = epoch in part.epoch_first and (run is None or run.epoch != epoch)
        producers = part.epoch_producers.setdefault(epoch, set())
        same_epoch = run is not None and run.epoch == epoch
        if resumed or (same_epoch and producer in producers):
            self.interleavings += 1
        if self.exclusive:
            if part.max_epoch is not None and epoch < part.max_epoch:
                began = part.epoch_first[part.max_epoch]
                self.violation(
                    "G1",
                    offset,
                    f"epoch goes back to {epoch} (producer {producer}) after "
                    f"epoch {part.max_epoch}: epochs must never decrease along the log",
                )
                self.violation(
                    "G2",
                    offset,
                    f"a record of epoch {epoch} (producer {producer}) after "
                    f"epoch {part.max_epoch} began at offset {began}: a superseded producer "
                    "wrote",
                )
            elif resumed:
                assert run is not None
                self.violation(
                    "G1",
                    offset,
                    f"epoch {epoch} resumes after epoch {run.epoch}; it began at "
                    f"offset {part.epoch_first[epoch]}: each epoch must be one segment",
                )
            elif same_epoch:
                assert run is not None
                self.violation(
                    "G1",
                    offset,
                    f"producer {producer} writes in epoch {epoch} after producer "
                    f"{run.producer}: one writer per epoch",
                )
            if epoch > part.token:
                self.violation(
                    "G1",
                    offset,
                    f"a record of epoch {epoch} (producer {producer}) above the "
                    f"partition's current epoch {part.token} (the producer row's token)",
                )
        producers.add(producer)
        part.epoch_first.setdefault(epoch, offset)
        if part.max_epoch is None or epoch > part.max_epoch:
            part.max_epoch = epoch
        part.run = _Run(epoch, producer, offset, offset)

    def _close(self, run: _Run) -> None:
        assert self.part is not None
        self.segments.append(
            Segment(self.part.index, run.epoch, run.producer, run.first, run.last, run.records)
        )

    def _value(self, value: bytes, offset: int | None, epoch: int | None) -> None:
        assert self.part is not None
        loc = _pack(self.part.index, offset)
        if value in self.fenced:
            self.fenced_seen.add(value)
            self.violation(
                "G2",
                offset,
                f"value {_show(value)} of a send that raised ProducerFenced is in the log",
            )
        if epoch is not None and value in self.acked:
            self.epoch_at[loc] = epoch
        if self.unique_values or value in self.tracked:
            first = self.first.get(value)
            if first is None:
                self.first[value] = loc
            else:
                self.extra.setdefault(value, []).append(loc)

    # -- after every partition --------------------------------------------------------------

    def report(self) -> LogReport:
        duplicates = 0
        for value, extra in self.extra.items():
            duplicates += len(extra)
            locs = [self.first[value], *extra]
            shown = ", ".join(_where(loc) for loc in locs[:_SHOW_LOCATIONS])
            more = "" if len(locs) <= _SHOW_LOCATIONS else f", ... ({len(locs)} in all)"
            self._at(
                "G5", extra[0], f"value {_show(value)} appears {len(locs)} times: {shown}{more}"
            )
        lost = 0
        for a in self.attempts:
            if a.outcome == "acked":
                lost += self._acked(a)
        fenced = sum(1 for a in self.attempts if a.outcome == "fenced")
        landed = sum(
            1 for a in self.attempts if a.outcome == "fenced" and a.value in self.fenced_seen
        )
        order = {g: i for i, g in enumerate(GUARANTEES)}
        violations = sorted(
            self.violations,
            key=lambda v: (v.partition, -1 if v.offset is None else v.offset, order[v.guarantee]),
        )
        return LogReport(
            topic=self.topic,
            partitions=self.partitions,
            records=self.records,
            segments=tuple(self.segments),
            duplicates=duplicates,
            interleavings=self.interleavings,
            fenced_attempts=fenced,
            lost=lost,
            violations=tuple(violations),
            fenced_landed=landed,
            exclusive=self.exclusive,
        )

    def _at(self, guarantee: str, loc: int, message: str) -> None:
        p, o = _unpack(loc)
        self.violations.append(Violation(guarantee, p, o, message))

    def _acked(self, a: Attempt) -> int:
        """G5 and G2 for one acknowledged send; returns 1 if it is lost."""
        first = self.first.get(a.value)
        acked_at = f"partition {a.partition} offset {a.offset}"
        if first is None:
            start = self.starts.get(a.partition)
            if a.offset is not None and start is not None and a.offset < start:
                return 0  # trimmed away by retention: not a loss
            self.violations.append(
                Violation(
                    "G5",
                    a.partition,
                    a.offset,
                    f"acknowledged value {_show(a.value)} "
                    f"(epoch {a.epoch}) is not in the log: an acknowledged write was lost",
                )
            )
            return 1
        locs = [first, *self.extra.get(a.value, ())]
        mine = _pack(a.partition, a.offset)
        if a.offset is None:
            mine = next((loc for loc in locs if _unpack(loc)[0] == a.partition), first)
        if mine not in locs:
            mine = first
            self._at(
                "G5",
                first,
                f"value {_show(a.value)} was acknowledged at {acked_at} but is at {_where(first)}",
            )
        epoch = self.epoch_at.get(mine)
        if a.epoch is not None and epoch is not None and epoch != a.epoch:
            self._at(
                "G2",
                mine,
                f"value {_show(a.value)} was acknowledged with epoch {a.epoch} "
                f"but its record carries epoch {epoch}",
            )
        return 0
