"""The Spark sinks that write a topic: per app id, the rows its finished batches wrote and
skipped as written before, the last batch it finished, and per partition the sessions of
the Spark workers' shared producers that wrote it (its task producers), from the sink state
each partition keeps (``<ns>:{<topic>/<p>}:sink:<app>``, see ``lua/include/sink.lua``).

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> sinks = spark_sinks(r, Keys("fencing"), "events")                  # doctest: +SKIP
>>> [(s.app_id, s.written, s.skipped, s.finished_batch) for s in sinks]  # doctest: +SKIP
[('etl', 1200, 200, 5)]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from .._keys import NAME_RE, Keys, encode_resource
from .._text import text
from .reading import PIPELINE_CHUNK, SCAN_COUNT, Reads, decode_hash, partition_key, to_int
from .topics import topic_meta, wanted_partitions


@dataclass(frozen=True, slots=True)
class SinkPartition:
    """An app's sink state on one partition: its query (lineage) and the query it took the
    app over from here (``""``: none), the batch begun last, the last batch finished (None:
    none yet), rows written and skipped (``tw``, ``tk``), and the sessions of its task
    producers (``w:<session>``: Spark workers' shared producers, sorted), kept until the
    finishing of a batch finds their lease lapsed."""

    partition: int
    query: str
    took_over: str
    begun_batch: int
    finished_batch: int | None
    written: int
    skipped: int
    task_producers: list[str]


@dataclass(frozen=True, slots=True)
class SinkStatus:
    """One app id's sink on a topic: totals over the partitions read, the query that holds
    the app now (one no partition says was taken over) and the last batch it finished
    (None: none yet)."""

    app_id: str
    query: str
    finished_batch: int | None
    written: int
    skipped: int
    partitions: list[SinkPartition]


def spark_sinks(
    r: redis.Redis,
    keys: Keys,
    topic: str,
    partitions: Iterable[int] | None = None,
    *,
    where: str = "",
) -> list[SinkStatus]:
    """The Spark sinks' states on a topic's partitions (all by default), sorted by app id.

    The app ids are found with one ``SCAN MATCH <ns>:{<topic>/*}:sink:*``. A key that holds
    another Redis type raises :class:`~fencing.WrongKeyType`.
    """
    meta = topic_meta(r, keys, topic, where=where)
    wanted = set(wanted_partitions(meta, partitions))
    pattern = f"{keys.namespace}:{{{encode_resource(meta.name)}/*}}:sink:*"
    found: list[tuple[str, int]] = []
    for raw in r.scan_iter(match=pattern, count=SCAN_COUNT):
        key = text(raw)
        _, sep, app = key.partition("}:sink:")
        if not sep or not NAME_RE.fullmatch(app):
            continue
        for p in wanted:
            if keys.partition(meta.name, p).sink(app) == key:
                found.append((app, p))
    found.sort()
    states: dict[str, list[SinkPartition]] = {}
    for i in range(0, len(found), PIPELINE_CHUNK):
        chunk = found[i : i + PIPELINE_CHUNK]
        reads = Reads(r)
        for app, p in chunk:
            pk = keys.partition(meta.name, p)
            state = partition_key(pk, pk.sink(app), "hash", f"Spark sink state of app {app!r}")
            reads.hgetall(state)
        for (app, p), reply in zip(chunk, reads.execute(), strict=True):
            fields = decode_hash(reply)
            q, b, c, took, tw, tk = (fields.get(f) for f in ("q", "b", "c", "p", "tw", "tk"))
            if q is None and tw is None:
                continue  # removed since the SCAN
            states.setdefault(app, []).append(
                SinkPartition(
                    partition=p,
                    query=q or "",
                    took_over=took or "",
                    begun_batch=to_int(b, -1),
                    finished_batch=None if c in (None, "", "-1") else to_int(c),
                    written=to_int(tw),
                    skipped=to_int(tk),
                    task_producers=sorted(f[2:] for f in fields if f.startswith("w:")),
                )
            )
    return [_app(app, parts) for app, parts in sorted(states.items())]


def _app(app: str, parts: list[SinkPartition]) -> SinkStatus:
    superseded = {s.took_over for s in parts}
    current = [s for s in parts if s.query not in superseded] or parts
    finished = [s.finished_batch for s in current if s.finished_batch is not None]
    return SinkStatus(
        app_id=app,
        query=current[0].query,
        finished_batch=max(finished) if finished else None,
        written=sum(s.written for s in parts),
        skipped=sum(s.skipped for s in parts),
        partitions=parts,
    )
