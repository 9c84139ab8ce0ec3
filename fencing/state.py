"""``ProducerState``: what a copy job saves with its input position to resume exactly once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .errors import InvalidArgument, InvalidArgumentType


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer's PID, generation and next sequence per partition (seed 003).

    Save it together with your input position (in one transaction of your own store); after
    a crash, open ``topic.producer(resume=state)``: the new incarnation fences the old one,
    and resending the batches after the saved state returns their original offsets if they
    had landed, instead of writing them twice.

    >>> state = producer.state                                     # doctest: +SKIP
    >>> saved = state.to_json()                                    # doctest: +SKIP
    >>> producer = topic.producer(resume=ProducerState.from_json(saved))  # doctest: +SKIP
    """

    topic: str
    producer_id: int
    generations: Mapping[int, int] = field(default_factory=dict)
    sequences: Mapping[int, int] = field(default_factory=dict)
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "generations", MappingProxyType(dict(self.generations)))
        object.__setattr__(self, "sequences", MappingProxyType(dict(self.sequences)))

    @property
    def generation(self) -> int:
        """The highest PID generation over the partitions."""
        return max(self.generations.values(), default=0)

    def next_sequence(self, partition: int) -> int:
        """The sequence the next batch on ``partition`` will start at."""
        return self.sequences.get(partition, 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "topic": self.topic,
            "producer_id": self.producer_id,
            "name": self.name,
            "generations": {str(p): g for p, g in self.generations.items()},
            "sequences": {str(p): s for p, s in self.sequences.items()},
        }

    def to_json(self) -> str:
        """The state as a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProducerState:
        """Inverse of :meth:`to_dict`; refuses malformed input."""
        try:
            return cls(
                topic=str(data["topic"]),
                producer_id=int(data["producer_id"]),
                name=data.get("name"),
                generations={int(p): int(g) for p, g in data["generations"].items()},
                sequences={int(p): int(s) for p, s in data["sequences"].items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidArgument(f"not a saved ProducerState: {exc!r}") from exc

    @classmethod
    def from_json(cls, text: str) -> ProducerState:
        """Inverse of :meth:`to_json`."""
        if not isinstance(text, str):
            raise InvalidArgumentType("ProducerState.from_json takes a str")
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"not a saved ProducerState: {exc}") from exc
