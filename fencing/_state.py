"""``ProducerState``: what a copy job saves with its input position to resume exactly once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._keys import validate_name
from .errors import FencingError, InvalidArgument, InvalidArgumentType

#: The largest integer the scripts hold exactly (Lua numbers are doubles): 2**53 - 1.
MAX_INT = 2**53 - 1
#: Topics have at most this many partitions.
MAX_PARTITIONS = 100_000


def _int(what: str, value: object, *, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentType(
            f"ProducerState {what} must be an int, got {type(value).__name__}: this is not a "
            "state that producer.state returned"
        )
    if not minimum <= value <= maximum:
        raise InvalidArgument(
            f"ProducerState {what} is {value}, outside [{minimum}, {maximum}]: no server could "
            "have given it, so the saved state is damaged; resuming from it could move a "
            "fence back. Open a new producer without resume="
        )
    return value


def _per_partition(what: str, values: object) -> dict[int, int]:
    if not isinstance(values, Mapping):
        raise InvalidArgumentType(
            f"ProducerState {what} must map partitions to ints, got {type(values).__name__}"
        )
    return {
        _int(f"{what} partition", p, maximum=MAX_PARTITIONS - 1): _int(f"{what}[{p}]", v)
        for p, v in values.items()
    }


def _decoded_incarnations(values: object) -> dict[int, Any]:
    if not isinstance(values, Mapping):
        raise InvalidArgument("not a saved ProducerState: incarnations")
    return {_decoded_int("partition", p): inc for p, inc in values.items()}


def _decoded_int(what: str, value: object) -> int:
    """An int from JSON: an int, or a str of decimal digits (JSON keys are strings)."""
    if isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidArgument(f"not a saved ProducerState: {what} is {value!r}, not an integer")


def _incarnations(values: object) -> dict[int, str]:
    if not isinstance(values, Mapping):
        raise InvalidArgumentType(
            "ProducerState incarnations must map partitions to str, got "
            f"{type(values).__name__}"
        )
    out: dict[int, str] = {}
    for p, inc in values.items():
        if not isinstance(inc, str) or not inc or not inc.isascii() or " " in inc:
            raise InvalidArgument(
                f"ProducerState incarnations[{p}] is {inc!r}, not a partition incarnation: "
                "this is not a state that producer.state returned"
            )
        out[_int("incarnations partition", p, maximum=MAX_PARTITIONS - 1)] = inc
    return out


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer's PID, generation and next sequence per partition.

    Save it together with your input position (in one transaction of your own store); after
    a crash, open ``topic.producer(resume=state)``: the new incarnation fences the old one,
    and resending the batches after the saved state returns their original offsets if they
    had landed, instead of writing them twice. A resend older than the topic's duplicate
    window raises :class:`~fencing.DuplicateSequence` (``reason="older-than-window"``):
    those records were written before, so skip them; the producer goes on after them.

    ``incarnations`` are those of the partitions the state was saved against: resuming it
    after the store lost its data (the partitions were recreated) raises
    :class:`~fencing.StateLost` before anything is written. (States saved by versions that
    did not keep them resume unchecked.)

    >>> state = producer.state                                     # doctest: +SKIP
    >>> saved = state.to_json()                                    # doctest: +SKIP
    >>> producer = topic.producer(resume=ProducerState.from_json(saved))  # doctest: +SKIP
    """

    topic: str
    producer_id: int
    generations: Mapping[int, int] = field(default_factory=dict)
    sequences: Mapping[int, int] = field(default_factory=dict)
    name: str | None = None
    incarnations: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Refused here, before any I/O: a generation the scripts cannot hold exactly would be
        # formatted back as another number (10**30 as a negative one: every older
        # incarnation un-fenced), and a negative sequence would fence the live incarnation
        # before failing.
        if not isinstance(self.topic, str):
            raise InvalidArgumentType("ProducerState topic must be a str")
        try:
            validate_name("topic", self.topic)
            if self.name is not None:
                validate_name("producer", self.name)
        except FencingError as exc:
            raise InvalidArgument(f"not a saved ProducerState: {exc}") from None
        _int("producer_id", self.producer_id, minimum=1)
        generations = _per_partition("generations", self.generations)
        sequences = _per_partition("sequences", self.sequences)
        object.__setattr__(self, "generations", MappingProxyType(generations))
        object.__setattr__(self, "sequences", MappingProxyType(sequences))
        incarnations = _incarnations(self.incarnations)
        object.__setattr__(self, "incarnations", MappingProxyType(incarnations))

    @property
    def generation(self) -> int:
        """The highest PID generation over the partitions.

        >>> ProducerState("orders", 7, generations={0: 2, 1: 3}).generation
        3
        """
        return max(self.generations.values(), default=0)

    def next_sequence(self, partition: int) -> int:
        """The sequence the next batch on ``partition`` will start at.

        >>> ProducerState("orders", 7, sequences={0: 10}).next_sequence(0)
        10
        """
        return self.sequences.get(partition, 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict.

        >>> ProducerState("orders", 7, sequences={0: 10}).to_dict()["sequences"]
        {'0': 10}
        """
        return {
            "topic": self.topic,
            "producer_id": self.producer_id,
            "name": self.name,
            "generations": {str(p): g for p, g in self.generations.items()},
            "sequences": {str(p): s for p, s in self.sequences.items()},
            "incarnations": {str(p): i for p, i in self.incarnations.items()},
        }

    def to_json(self) -> str:
        """The state as a JSON string.

        >>> json.loads(ProducerState("orders", 7, sequences={0: 10}).to_json())["sequences"]
        {'0': 10}
        """
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProducerState:
        """Inverse of :meth:`to_dict`; refuses malformed input.

        >>> state = ProducerState("orders", 7, sequences={0: 10})
        >>> ProducerState.from_dict(state.to_dict()) == state
        True
        """
        if not isinstance(data, Mapping):
            raise InvalidArgumentType(f"not a saved ProducerState: {type(data).__name__}")
        try:
            generations, sequences = data["generations"], data["sequences"]
            if not isinstance(generations, Mapping) or not isinstance(sequences, Mapping):
                raise InvalidArgument("not a saved ProducerState: generations/sequences")
            return cls(
                topic=data["topic"],
                producer_id=_decoded_int("producer_id", data["producer_id"]),
                name=data.get("name"),
                generations={
                    _decoded_int("partition", p): _decoded_int("generation", g)
                    for p, g in generations.items()
                },
                sequences={
                    _decoded_int("partition", p): _decoded_int("sequence", q)
                    for p, q in sequences.items()
                },
                incarnations=_decoded_incarnations(data.get("incarnations", {})),
            )
        except KeyError as exc:
            raise InvalidArgument(f"not a saved ProducerState: {exc!r} is missing") from None

    @classmethod
    def from_json(cls, text: str) -> ProducerState:
        """Inverse of :meth:`to_json`.

        >>> state = ProducerState("orders", 7, sequences={0: 10})
        >>> ProducerState.from_json(state.to_json()) == state
        True
        """
        if not isinstance(text, str):
            raise InvalidArgumentType("ProducerState.from_json takes a str")
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"not a saved ProducerState: {exc}") from exc
