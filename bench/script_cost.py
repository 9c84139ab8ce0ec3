"""Server time of the append script, path by path and step by step (A/B in alternating rounds).

    .venv/bin/python -m bench.script_cost

``lua/append-9.lua`` has a fast path for the common send (``lua/include/append_fast.lua``)
and a general path behind it that runs whenever the fast path declines (see its header).
Each row loads the script it measures, built from the includes (fencing._lua_loader): the
full script; the fast path alone (its include by itself, answering an error where it would
hand over); the general path alone (the script without the fast path's include: what every
send cost before the fast path, with the same arguments). All run against the same kind of
call, alternating, in one process; INFO commandstats gives the server's own microseconds per
call, and the Redis calls the script makes per call (every command counted there but the
EVALSHA itself). The producer is SHARED and idempotent (the default, as in ``bench.coalesce``); one
more row sends the full script for an EXCLUSIVE holder (which also extends its lease on
every send), and one on a topic whose duplicate window is 1,000 batches instead of 5 (the
per-send work must not grow with the window), and two send a message id with each record (a
single send of one record, whose id is new, and a batch of 10 such records in one caller's
call).

The steps of the fast path are chosen by the arguments, not by cutting the script: the fast
path alone is sent calls it declines at one step (another partition incarnation, another
epoch, a sequence out of order), so each such row is what the fast path costs up to and
including that step; a declined call writes nothing. The difference between two rows is
what the steps between them cost. The minimal check-and-write script of ``bench.coalesce``
(the floor of any fenced append) runs alongside with its own two keys and arguments.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import SimpleNamespace

import redis

import fencing
from fencing import AccessMode
from fencing import _protocol as protocol
from fencing._lua_loader import script, script_of_includes, script_without
from fencing._sync.metadata import metadata_of

from .coalesce import FLOOR_SCRIPT, VALUE
from .common import server

FLOOR = "minimal check-and-write script (bench.coalesce)"
FULL = "full script"
EXCLUSIVE = "full script, EXCLUSIVE holder"
FAST = "fast path alone"
GENERAL = "general path alone (the script without its fast path)"
WIDE = "full script, duplicate window of 1000 batches"
IDS = "full script, one record with a new message id"
IDS10 = "full script, 10 records with new message ids, one caller's call"
NOOP = "no-op with the same arguments"
DECLINED = "FAST_PATH_DECLINED"

#: Rows that send the fast path alone a call it declines at one step, by what is wrong.
DECLINES = {
    "fast path alone, declining at the partition check": "incarnation",
    "fast path alone, declining at the producer check": "epoch",
    "fast path alone, declining at the PID check": "sequence",
}
#: The rows whose calls write (their sequence moves on); the others are sent one call.
WRITES = (FULL, EXCLUSIVE, FAST, GENERAL, WIDE, IDS, IDS10)
#: Records per call with message ids, by row.
WITH_IDS = {IDS: 1, IDS10: 10}


def variants() -> dict[str, str]:
    """Every script to measure, by row name (the floor's added by the caller)."""
    full = script("append").source
    fast = script_of_includes(
        "append", 9, ["append_fast"], f"return redis.error_reply('{DECLINED}')\n"
    ).source
    out = {FULL: full, EXCLUSIVE: full, WIDE: full, FAST: fast, IDS: full, IDS10: full}
    out.update(dict.fromkeys(DECLINES, fast))
    out[GENERAL] = script_without("append", "append_fast").source
    out[NOOP] = "return '0 0 0 0 0'"
    return out


def main() -> None:
    with server() as s:
        r = redis.Redis.from_url(s.url)
        client = fencing.Client.from_url(s.url, namespace="cost")
        sources = variants()
        sources[FLOOR] = FLOOR_SCRIPT
        calls: dict[str, Callable[[], protocol.ScriptCall[object]]] = {}
        shas: dict[str, str] = {}
        for i, (name, src) in enumerate(sources.items()):
            shas[name] = r.script_load(src)
            if name == FLOOR:
                floor = SimpleNamespace(keys=("cost:{f}:meta", "cost:{f}:stream"), args=(1, VALUE))
                calls[name] = lambda f=floor: f  # type: ignore[misc]
                continue
            topic = client.topic(f"t{i}", partitions=1, dedup_window=1000 if name == WIDE else 5)
            mode = AccessMode.EXCLUSIVE if name == EXCLUSIVE else AccessMode.SHARED
            producer = topic.producer(mode, lease_ttl=600)
            producer.send(b"x")
            standing = producer._queues[0].standing
            # A call that writes moves the sequence on; the others are sent the next one.
            writes = name in WRITES
            ids = WITH_IDS.get(name, 0)
            counter: Iterator[int] = (
                iter(range(1, 10**9, max(ids, 1))) if writes else itertools.repeat(1)
            )
            wrong = DECLINES.get(name, "")

            def make(  # type: ignore[no-untyped-def]
                t=topic, st=standing, seq=counter, wrong=wrong, ids=ids
            ) -> protocol.ScriptCall[object]:
                first = next(seq)
                records = [fencing.Record(b"x" * 100)]
                if ids:
                    records = [
                        fencing.Record(b"x" * 100, message_id=f"in/{first + i:012d}")
                        for i in range(ids)
                    ]
                batch = protocol.topic.encode_batch(records, t.limits)
                writer = st.writer
                if wrong == "epoch":
                    writer = replace(writer, epoch=writer.epoch + 1)
                incarnation = metadata_of(t).incarnation_of(0)
                return protocol.topic.append(  # type: ignore[return-value]
                    st.pk,
                    batch,
                    incarnation="other" if wrong == "incarnation" else incarnation,
                    seen_next=0,
                    expected_offset=None,
                    writer=writer,
                    sequenced=protocol.topic.Sequenced(
                        st.generation,
                        first + (1 if wrong == "sequence" else 0),
                        None,
                        "",
                    ),
                )

            calls[name] = make
        usec: dict[str, list[float]] = {name: [] for name in sources}
        inner: dict[str, list[float]] = {name: [] for name in sources}
        for _ in range(12):
            for name in sources:
                r.config_resetstat()
                for _ in range(300):
                    call = calls[name]()
                    try:
                        r.evalsha(shas[name], len(call.keys), *call.keys, *call.args)
                    except redis.ResponseError as exc:
                        # Only the rows meant to decline may: any other error would time
                        # another path.
                        if name not in DECLINES or DECLINED not in str(exc):
                            raise
                    else:
                        assert name not in DECLINES, f"{name}: the fast path took the call"
                stats = r.info("commandstats")
                usec[name].append(stats["cmdstat_evalsha"]["usec_per_call"])
                # (config_resetstat runs through the connection, not the script.)
                made = sum(
                    v["calls"]
                    for k, v in stats.items()
                    if k not in ("cmdstat_evalsha", "cmdstat_config")
                )
                inner[name].append(made / stats["cmdstat_evalsha"]["calls"])
        print(
            f"server: {s.kind} {s.version}; median server microseconds per call, "
            "Redis calls from Lua per call"
        )
        for name, values in sorted(usec.items(), key=lambda kv: statistics.median(kv[1])):
            made = statistics.median(inner[name])
            print(f"  {statistics.median(values):7.1f}  {made:5.1f}  {name}")
        client.close()


if __name__ == "__main__":
    main()
