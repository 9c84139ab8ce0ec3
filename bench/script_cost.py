"""Server time of the append script, step by step (A/B in alternating rounds).

    .venv/bin/python -m bench.script_cost

``lua/append-7.lua`` has a fast path for the common send (``lua/include/append_fast.lua``)
and a general path behind it that runs whenever the fast path declines (see its header).
Copies of the fast path cut short after each step run against the same arguments as the
full script,
alternating, in one process; INFO commandstats gives the server's own microseconds per call.
The difference between two cuts is what that step costs. Cut copies never write, so they are
all sent the same sequence (the next one after the state's): each measures its accepting
path. The producer is SHARED and idempotent (the default, as in ``bench.coalesce``); one
more row sends the full script for an EXCLUSIVE holder (which also extends its lease on
every send), one sends the script without its fast path: what every send cost before the
fast path, with the same arguments, and one sends the full script on a topic whose duplicate
window is 1,000 batches instead of 5 (the per-send work must not grow with the window). The
minimal check-and-write script of
``bench.coalesce`` (the floor of any fenced append) runs alongside with its own two keys and
arguments.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import redis

import fencing
from fencing import AccessMode
from fencing import _protocol as protocol
from fencing._lua_loader import _build, lua_dir, script

from .coalesce import FLOOR_SCRIPT, VALUE
from .common import server

FLOOR = "minimal check-and-write script (bench.coalesce)"
FULL = "full script"
EXCLUSIVE = "full script, EXCLUSIVE holder"
GENERAL = "general path alone (the script before its fast path)"
WIDE = "full script, duplicate window of 1000 batches"

#: Where each cut copy of the script returns early: before these lines of its fast path.
CUTS = {
    "fast path: arguments parsed": "  local v = try('HMGET', meta,",
    "fast path: partition checked": "    local w\n",
    "fast path: producer checked": "      local pids, raw, g, s, tw, x, o, b",
    "fast path: PID checked": "        local stream, layout = KEYS[2], ARGV[6]",
}


def variants() -> dict[str, str]:
    """Every script to measure, by row name (the floor's added by the caller)."""
    fast_include = '--- @include "append_fast"\n'
    text = (lua_dir() / "append-7.lua").read_text()
    fast = (lua_dir() / "include" / "append_fast.lua").read_text()
    full = script("append").source
    out = {FULL: full, EXCLUSIVE: full, WIDE: full}
    for name, line in CUTS.items():
        at = fast.index(line)
        cut = fast[:at] + "do return '0 0 0 0 0' end\n" + fast[at:]
        out[name] = _build("append", 7, cut, lua_dir()).source
    out[GENERAL] = _build("append", 7, text.replace(fast_include, ""), lua_dir()).source
    out["no-op with the same arguments"] = "return '0 0 0 0 0'"
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
            standing = producer._standing[0]
            # The full script writes, so its sequence moves on; a cut copy never does.
            writes = name in (FULL, EXCLUSIVE, GENERAL, WIDE)
            counter: Iterator[int] = iter(range(1, 10**9)) if writes else itertools.repeat(1)

            def make(t=topic, st=standing, seq=counter) -> protocol.ScriptCall[object]:  # type: ignore[no-untyped-def]
                batch = protocol.topic.encode_batch([fencing.Record(b"x" * 100)], t.limits)
                return protocol.topic.append(  # type: ignore[return-value]
                    st.pk,
                    batch,
                    incarnation=t.incarnation_of(0),
                    seen_next=0,
                    expected_offset=None,
                    writer=st.writer,
                    sequenced=protocol.topic.Sequenced(st.generation, next(seq), None, ""),
                )

            calls[name] = make
        usec: dict[str, list[float]] = {name: [] for name in sources}
        for _ in range(12):
            for name in sources:
                r.config_resetstat()
                for _ in range(300):
                    call = calls[name]()
                    # Every variant answers: an error would time another path.
                    r.evalsha(shas[name], len(call.keys), *call.keys, *call.args)
                usec[name].append(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
        print(f"server: {s.kind} {s.version}; median server microseconds per call")
        for name, values in sorted(usec.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"  {statistics.median(values):7.1f}  {name}")
        client.close()


if __name__ == "__main__":
    main()
