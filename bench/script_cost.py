"""Server time of the append script, step by step (A/B in alternating rounds).

    .venv/bin/python -m bench.script_cost

Copies of ``lua/append-6.lua`` cut short after each step run against the same arguments as
the full script, alternating, in one process; INFO commandstats gives the server's own
microseconds per call. The difference between two cuts is what that step costs. Cut copies
never write, so they are all sent the same sequence (the next one after the state's): each
measures its accepting path, never an OUT_OF_ORDER_SEQUENCE error. The minimal
check-and-write script of ``bench.coalesce`` (the floor of any fenced append) runs alongside
with its own two keys and arguments. The loader leaves out helpers a script never names, so
a cut copy carries only the helpers of its steps: each step's cost includes the closures of
the helpers it is the first to use.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
from collections.abc import Callable
from types import SimpleNamespace

import redis

import fencing
from fencing import AccessMode, protocol
from fencing.lua_loader import _build, lua_dir, script

from .coalesce import FLOOR_SCRIPT, VALUE
from .common import server

FLOOR = "minimal check-and-write script (bench.coalesce)"

#: Where each cut copy of the script returns early: before the step comments of
#: lua/append-6.lua (each check is marked with the guarantee it serves).
CUTS = {
    "arguments parsed": "-- G9: ",
    "partition checked": "-- G2: ",
    "producer checked": "-- G5: ",
    "PID checked": "-- G3: ",
}


def main() -> None:
    source = (lua_dir() / "append-6.lua").read_text()
    with server() as s:
        r = redis.Redis.from_url(s.url)
        client = fencing.Client.from_url(s.url, namespace="cost")
        variants: dict[str, str] = {"full script": script("append").source}
        for name, marker in CUTS.items():
            cut = source[: source.index(marker)] + "return {0, 0, 0, 0}\n"
            variants[name] = _build("append", 6, cut, lua_dir()).source
        variants["no-op with the same arguments"] = "return {0, 0, 0, 0}"
        variants[FLOOR] = FLOOR_SCRIPT
        calls: dict[str, Callable[[], protocol.ScriptCall[object]]] = {}
        shas: dict[str, str] = {}
        for i, (name, src) in enumerate(variants.items()):
            shas[name] = r.script_load(src)
            if name == FLOOR:
                floor = SimpleNamespace(keys=("cost:{f}:meta", "cost:{f}:stream"), args=(1, VALUE))
                calls[name] = lambda f=floor: f  # type: ignore[misc]
                continue
            topic = client.topic(f"t{i}", partitions=1)
            producer = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=600)
            producer.send(b"x")
            standing = producer._standing[0]
            # The full script writes, so its sequence moves on; a cut copy never does.
            counter = iter(range(1, 10**9)) if name == "full script" else itertools.repeat(1)

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
        usec: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(12):
            for name in variants:
                r.config_resetstat()
                for _ in range(300):
                    call = calls[name]()
                    # Cut copies do not write, so their later sequences are refused: fine.
                    with contextlib.suppress(redis.exceptions.ResponseError):
                        r.evalsha(shas[name], len(call.keys), *call.keys, *call.args)
                usec[name].append(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
        print(f"server: {s.kind} {s.version}; median server microseconds per call")
        for name, values in sorted(usec.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"  {statistics.median(values):7.1f}  {name}")
        client.close()


if __name__ == "__main__":
    main()
