"""What the verifier takes and what it finds: attempts, violations and segments.

>>> Attempt(b"w1-17", partition=0, outcome="acked", offset=41, epoch=3).outcome
'acked'
>>> str(Violation("G6", 0, 7, "offset 7 missing"))
'G6 partition 0 offset 7: offset 7 missing'
"""

from __future__ import annotations

from dataclasses import dataclass

#: What a writer can say happened to a send (:attr:`Attempt.outcome`).
OUTCOMES = ("acked", "fenced", "unknown")
#: The guarantees checked, in the order verdicts and violations are listed.
GUARANTEES = ("G1", "G2", "G5", "G6")


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
