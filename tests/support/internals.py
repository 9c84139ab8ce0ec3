"""The library's internals a test reaches for, in either flavour: the context behind a
client (drivers, keeper, notifier, retry budgets, producer ids) and the metadata behind a
topic (partition keys, incarnations, offsets seen), the token a consumer holds a partition by.

>>> context_of(client).driver(1.0)                                      # doctest: +SKIP
>>> metadata_of(topic).partition_keys(0)                                # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import fencing.aio
from fencing._async import context as aio_context
from fencing._async import metadata as aio_metadata
from fencing._sync import context as sync_context
from fencing._sync import metadata as sync_metadata

from .flavours import unwrap


def context_of(client: Any) -> Any:
    """The context of a ``fencing.Client`` or a ``fencing.aio.Client`` (or a test's wrapper)."""
    obj = unwrap(client)
    if isinstance(obj, fencing.aio.Client | aio_context.Context):
        return aio_context.context_of(obj)
    return sync_context.context_of(obj)


def metadata_of(topic: Any) -> Any:
    """The metadata of a ``fencing.Topic`` or a ``fencing.aio.Topic`` (or a test's wrapper)."""
    obj = unwrap(topic)
    if isinstance(obj, fencing.aio.Topic | aio_metadata.TopicMetadata):
        return aio_metadata.metadata_of(obj)
    return sync_metadata.metadata_of(obj)


def consumer_token(consumer: Any, partition: int) -> int:
    """The fencing token of the grant by which ``consumer`` holds ``partition``."""
    obj = unwrap(consumer)
    return int(obj._owner.grants[f"{obj.topic.name}/{partition}"].token)
