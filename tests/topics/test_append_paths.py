"""The append script's fast path (lua/include/append_fast.lua) agrees with its general path
(lua/append-9.lua).

The script first tries a fast path for the common send and, whenever that path declines,
runs the general path from the start. Each step here runs one append call three times from
the same stored state (DUMP and RESTORE of every key the script touches): through the
whole script, through the general path alone (the script without the fast path's
include), and through the fast path alone (that include by itself). The whole script and
the general path must give the same reply or error and leave the same state (server times
masked); the fast path alone must either decline (so the general path answered) or give
exactly the whole script's answer. Each step also says which path is meant to answer it,
so a fast path that quietly declines everything fails too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import redis

import fencing
from fencing import AccessMode
from fencing import _protocol as protocol
from fencing._keys import Keys, PartitionKeys
from fencing._lua_loader import script, script_of_includes, script_without
from fencing._protocol.topic import Sequenced
from fencing._sync.metadata import metadata_of
from fencing._sync.producer import Producer

#: Also on Redis 8: the script against the server (DUMP/RESTORE, script flags, error replies).
pytestmark = pytest.mark.server_specific

DECLINED = "FAST_PATH_DECLINED"
#: The fields of the append script's header argument (ARGV[2]), in order.
HEADER = (
    "seen_next",
    "epoch",
    "ttl_ms",
    "pid_gen",
    "first_seq",
    "fresh",
    "expected",
    "mode",
    "producer",
    "name",
)
#: Long enough that no lease renewal falls inside a test.
LEASE_TTL = 60.0


def _variants() -> dict[str, str]:
    # Each path loaded by itself: the general path is the append without its fast-path
    # include; the fast path is that include alone, declining where the general path would
    # take over.
    return {
        "whole": script("append").source,
        "general": script_without("append", "append_fast").source,
        "fast": script_of_includes(
            "append", 9, ["append_fast"], f"return redis.error_reply('{DECLINED}')\n"
        ).source,
    }


VARIANTS = _variants()


@dataclass
class Paths:
    raw: redis.Redis
    client: fencing.Client

    def time_ms(self) -> int:
        seconds, micros = self.raw.time()
        return seconds * 1000 + micros // 1000

    def run(self, source: str, keys: tuple[str, ...], args: tuple[Any, ...]) -> str:
        try:
            reply = self.raw.eval(source, len(keys), *keys, *args)
        except redis.ResponseError as exc:
            return f"error: {exc}"
        return f"reply: {reply!r}"

    def dump(self, keys: tuple[str, ...]) -> list[bytes | None]:
        return [self.raw.dump(k) for k in keys]

    def restore(self, keys: tuple[str, ...], dumps: list[bytes | None]) -> None:
        for key, value in zip(keys, dumps, strict=True):
            if value is None:
                self.raw.delete(key)
            else:
                self.raw.restore(key, 0, value, replace=True)

    def state(self, keys: tuple[str, ...]) -> list[object]:
        out: list[object] = []
        for key in keys:
            kind = self.raw.type(key)
            if kind == b"hash":
                out.append(sorted(self.raw.hgetall(key).items()))
            elif kind == b"stream":
                out.append(self.raw.xrange(key))
            elif kind == b"list":
                out.append(self.raw.lrange(key, 0, -1))
            elif kind == b"zset":
                out.append(self.raw.zrange(key, 0, -1, withscores=True))
            elif kind == b"none":
                out.append(None)
            else:
                out.append((kind, self.raw.dump(key)))
        return out

    def check(self, call: protocol.ScriptCall[Any], path: str) -> str:
        """Run ``call`` through the three variants from the same state (see the module
        docstring); ``path`` is the one meant to answer it. Leaves the whole script's state
        behind and returns its answer (server times masked)."""
        keys, args = call.keys, call.args
        before = self.dump(keys)
        since = self.time_ms()
        answers: dict[str, tuple[str, list[object]]] = {}
        for name in ("general", "fast", "whole"):
            self.restore(keys, before)
            answer = self.run(VARIANTS[name], keys, args)
            answers[name] = (_mask(answer, since), _mask(self.state(keys), since))
        assert answers["whole"] == answers["general"]
        if DECLINED in answers["fast"][0]:
            assert path == "general", f"the fast path declined: {answers['whole'][0]}"
            assert answers["fast"][1] == _mask(self.state_of(before, keys), since)
        else:
            assert path == "fast", f"the fast path answered: {answers['fast'][0]}"
            assert answers["fast"] == answers["whole"]
        return answers["whole"][0]

    def state_of(self, dumps: list[bytes | None], keys: tuple[str, ...]) -> list[object]:
        """The state ``dumps`` stands for (restored, read, then left as it was)."""
        now = self.dump(keys)
        self.restore(keys, dumps)
        try:
            return self.state(keys)
        finally:
            self.restore(keys, now)


def _mask(value: object, since: int) -> Any:
    """``value`` with every server time at or after ``since`` (13+ digits) as 'T'."""

    def times(text: str) -> str:
        return re.sub(r"\d{13,}", lambda m: "T" if int(m.group()) >= since else m.group(), text)

    if isinstance(value, bytes):
        return times(value.decode("latin-1"))
    if isinstance(value, str):
        return times(value)
    if isinstance(value, float):
        return times(str(int(value)))
    if isinstance(value, (list, tuple)):
        return [_mask(v, since) for v in value]
    if isinstance(value, dict):
        return {_mask(k, since): _mask(v, since) for k, v in value.items()}
    return value


@pytest.fixture
def paths(client: fencing.Client, raw: redis.Redis) -> Iterator[Paths]:
    yield Paths(raw, client)


@dataclass
class Sender:
    """Builds append calls for one open producer on partition 0 of its topic."""

    topic: fencing.Topic
    producer: Producer
    seq: int = 0

    @property
    def pk(self) -> PartitionKeys:
        return metadata_of(self.topic).partition_keys(0)

    def call(
        self,
        values: list[fencing.Record] | None = None,
        *,
        first: int | None = None,
        seen_next: int = 0,
        expected: int | None = None,
        generation: int | None = None,
        epoch: int | None = None,
        incarnation: str | None = None,
        header: dict[str, str] | None = None,
    ) -> protocol.ScriptCall[Any]:
        standing = self.producer._queues[0].standing
        records = values or [fencing.Record(b"v%d" % self.seq)]
        idempotent = self.producer.idempotent
        writer = standing.writer if epoch is None else replace(standing.writer, epoch=epoch)
        call = protocol.topic.append(
            self.pk,
            protocol.topic.encode_batch(records, self.topic.limits),
            incarnation=incarnation or metadata_of(self.topic).incarnation_of(0),
            seen_next=seen_next,
            expected_offset=expected,
            writer=writer,
            sequenced=Sequenced(
                standing.generation if generation is None else generation,
                (self.seq if first is None else first) if idempotent else None,
                None,
                self.producer.name or "",
            ),
        )
        if header:  # hand-made header fields (arguments no builder sends)
            fields = dict(
                zip(
                    HEADER,
                    str(call.args[1]).split(" "),
                    strict=True,
                )
            )
            fields.update(header)
            call = replace(call, args=(call.args[0], " ".join(fields.values()), *call.args[2:]))
        return call

    def sent(self, n: int = 1) -> None:
        self.seq += n


def opened(
    client: fencing.Client,
    name: str,
    mode: AccessMode = AccessMode.SHARED,
    **options: Any,
) -> Callable[..., Sender]:
    topic_options = {
        k: options.pop(k)
        for k in ("max_len", "message_id_window", "message_id_ttl")
        if k in options
    }
    topic = client.topic(name, partitions=1, **topic_options)

    def make(**more: Any) -> Sender:
        p = topic.producer(mode, lease_ttl=LEASE_TTL, **options, **more)
        p.open()
        return Sender(topic, p, p._queues[0].standing.next_sequence)

    return make


RECORDS = [
    fencing.Record(b"a"),
    fencing.Record(b"b", key=b"k"),
    fencing.Record(b"c", headers={"h": b"1"}),
    fencing.Record(b"d", key=b"k2", headers={"h": b"2"}),
]


def test_idempotent_shared_sends(paths: Paths, client: fencing.Client) -> None:
    s = opened(client, "t")()
    pk = s.pk
    # The first batch of a new partition (next 0) and of a new PID state: general.
    assert paths.check(s.call(), "general").startswith("reply: b'0 ")
    s.sent()
    # The next batch: fast, one record, then every record shape in one batch.
    assert paths.check(s.call(seen_next=1), "fast").startswith("reply: b'1 T 0 0 ")
    s.sent()
    assert paths.check(s.call(RECORDS, seen_next=2), "fast").startswith("reply: b'2 T 0 0 ")
    s.sent(4)
    # Resend of a batch in the window: a duplicate, answered by the general path.
    assert paths.check(s.call(RECORDS, first=2), "general").startswith("reply: b'2 T 0 1 ")
    # A window that fills up and then drops its oldest batch (sequence 10: one digit more).
    for _ in range(6):
        paths.check(s.call(seen_next=0), "fast")
        s.sent()
    assert "older-than-window" in paths.check(s.call(RECORDS, first=2), "general")
    # Refusals, all the general path's.
    assert "OUT_OF_ORDER_SEQUENCE" in paths.check(s.call(first=s.seq + 1), "general")
    assert "DUPLICATE_SEQUENCE" in paths.check(s.call(first=s.seq - 1), "general")
    assert "STATE_LOST" in paths.check(s.call(seen_next=10**6), "general")
    assert "STATE_LOST" in paths.check(s.call(incarnation="other"), "general")
    call = s.call()
    other_row = replace(call, args=(*call.args[:3], "other", *call.args[4:]))
    assert "STATE_LOST" in paths.check(other_row, "general")
    assert "STATE_LOST" in paths.check(s.call(epoch=s.producer.epoch(0) + 1), "general")
    assert "PRODUCER_FENCED" in paths.check(s.call(epoch=s.producer.epoch(0) - 1), "general")
    # Expected offsets: the right one is fast, any other the general path's.
    nxt = int(paths.raw.hget(pk.meta, "next"))  # type: ignore[arg-type]
    paths.check(s.call(expected=nxt, seen_next=nxt), "fast")
    s.sent()
    assert "OFFSET_MISMATCH" in paths.check(s.call(expected=nxt), "general")
    # seen_next behind the next offset (another producer appended since): fast.
    paths.check(s.call(seen_next=1), "fast")
    s.sent()


def test_bad_arguments_are_the_general_paths(paths: Paths, client: fencing.Client) -> None:
    s = opened(client, "t")()
    paths.check(s.call(), "general")
    s.sent()
    for field, value in [
        ("seen_next", "x"),
        ("seen_next", "-1"),
        ("seen_next", "1" * 16),
        ("seen_next", "0" * 17 + "1"),
        ("epoch", ""),
        ("epoch", "1.0"),
        ("ttl_ms", "0"),
        ("ttl_ms", "-5"),
        ("ttl_ms", "1" * 18),
        ("pid_gen", "-1"),
        ("first_seq", "0" + str(s.seq)),
        ("first_seq", "-1"),
        ("first_seq", "1e3"),
        ("expected", "x"),
        ("expected", "01"),
        ("mode", "y"),
    ]:
        # Legal (seen_next -1, first_seq with a leading zero) or not: the general path's.
        call = s.call(header={field: value})
        before = paths.dump(call.keys)
        paths.check(call, "general")
        paths.restore(call.keys, before)
    # A seen_next with a leading zero is the same number: the fast path takes it.
    paths.check(s.call(header={"seen_next": "01"}), "fast")
    # A header that does not split into its ten fields.
    call = s.call()
    bad = replace(call, args=(call.args[0], "1 2 3", *call.args[2:]))
    assert "BAD_ARGUMENT header" in paths.check(bad, "general")
    # An empty batch.
    call = s.call()
    empty = replace(call, args=(*call.args[:5], ""))
    assert "BAD_ARGUMENT layout" in paths.check(empty, "general")


def test_producer_state_cases(paths: Paths, client: fencing.Client, raw: redis.Redis) -> None:
    s = opened(client, "t")()
    pk = s.pk
    for _ in range(2):
        paths.check(s.call(), "general" if s.seq == 0 else "fast")
        s.sent()
    pid = str(s.producer.producer_id)
    state = raw.hget(pk.pids, pid).decode()  # type: ignore[union-attr]
    g, last, t, x, rest = state.split(" ", 4)
    window = rest[rest.index(";") :]
    now = paths.time_ms()
    old = now - 8 * 24 * 3600 * 1000

    def probe(path: str, text: str | None = None, **call: Any) -> str:
        """Check a call against the state ``text`` (and keys changed by the caller), then
        put every key back."""
        c = s.call(**call)
        before = paths.dump(c.keys)
        if text is not None:
            raw.hset(pk.pids, pid, text)
        try:
            return paths.check(c, path)
        finally:
            paths.restore(c.keys, before)

    probe("fast")
    # An expiry index entry older than a minute: refreshed by the general path.
    probe("general", f"{g} {last} {t} {now - 61_000} {rest}")
    # A last write older than a second: the fast path reads the partition's expiry.
    probe("fast", f"{g} {last} {now - 5_000} {x} {rest}")
    # A state past the partition's expiry is gone: a fresh start, the general path's (also
    # with a fresh expiry index entry).
    probe("general", f"{g} {last} {old} {old} {rest}")
    probe("general", f"{g} {last} {old} {now - 1000} {rest}")
    # A state without an owner (written before owners were kept), or another owner's.
    probe("general", f"{g} {last} {t} {x} {window}")
    probe("general", f"{g} {last} {t} {x}{window}")
    assert "STATE_LOST" in probe("general", f"{g} {last} {t} {x} other{window}")
    # A last sequence of -1 (a state opened, nothing written since).
    probe("general", f"{g} -1 {t} {x} {rest}", first=0)
    # Another PID generation: a newer one is taken by the general path, an older one fenced.
    probe("general", generation=int(g) + 1)
    assert "PRODUCER_FENCED" in probe("general", f"{int(g) + 1} {last} {t} {x} {rest}")
    # A state written by an older version (its window inline): read with an empty window.
    probe("general", f"{g} {last} {t} {x} {s.producer.session}|0 0 0a1b2c3d 0")
    # A state this version cannot read.
    assert "STATE_LOST" in probe("general", "junk")
    # Keys of another type, and the stream gone while the partition has records.
    for key in (pk.meta, pk.owner, pk.pids, pk.stream, pk.names, pk.window):
        c = s.call()
        before = paths.dump(c.keys)
        raw.delete(key)
        raw.set(key, "x")
        # (An unnamed producer with a live state never reads the names.)
        answer = paths.check(c, "fast" if key == pk.names else "general")
        assert "WRONG_TYPE" in answer or key == pk.names, answer
        paths.restore(c.keys, before)
    c = s.call()
    before = paths.dump(c.keys)
    raw.delete(pk.stream)
    assert "STATE_LOST" in paths.check(c, "general")
    paths.restore(c.keys, before)
    probe("fast")


def test_other_producers(paths: Paths, client: fencing.Client) -> None:
    # Not idempotent: no PID state, fast from the second batch.
    s = opened(client, "plain")(idempotent=False)
    paths.check(s.call(), "general")
    paths.check(s.call(RECORDS), "fast")
    for pid_gen in ("1" * 18, "-1"):  # not compared with a state: still checked
        assert "BAD_ARGUMENT" in paths.check(s.call(header={"pid_gen": pid_gen}), "general")
    # Exclusive: the lease is extended by every send.
    x = opened(client, "excl", AccessMode.EXCLUSIVE)()
    paths.check(x.call(), "general")
    x.sent()
    paths.check(x.call(RECORDS), "fast")
    x.sent(4)
    call = x.call()
    other = replace(call, args=(*call.args[:2], "other", *call.args[3:]))
    assert "PRODUCER_FENCED" in paths.check(other, "general")
    # An exclusive holder of another session (checked on the row even with no PID state).
    plain = opened(client, "excl-plain", AccessMode.EXCLUSIVE)(idempotent=False)
    paths.check(plain.call(), "general")
    paths.check(plain.call(), "fast")
    call = plain.call()
    other = replace(call, args=(*call.args[:2], "other", *call.args[3:]))
    assert "PRODUCER_FENCED" in paths.check(other, "general")
    # Named: fast while the name names this incarnation.
    named = opened(client, "named")(name="writer")
    paths.check(named.call(), "general")
    named.sent()
    paths.check(named.call(), "fast")
    named.sent()
    names = named.pk.names
    held = paths.raw.hget(names, "writer")
    assert held is not None
    paths.raw.hset(names, "writer", b"999 0")
    assert "PRODUCER_FENCED" in paths.check(named.call(), "general")
    paths.raw.hdel(names, "writer")
    paths.check(named.call(), "fast")
    paths.raw.hset(names, "writer", held)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ids(*ids: str, shapes: bool = False) -> list[fencing.Record]:
    """Records with these message ids; with ``shapes``, every record shape in turn."""
    if not shapes:
        return [fencing.Record(b"v-" + i.encode(), message_id=i) for i in ids]
    return [replace(RECORDS[j % len(RECORDS)], message_id=i) for j, i in enumerate(ids)]


def test_message_ids(paths: Paths, client: fencing.Client, raw: redis.Redis) -> None:
    for idempotent in (True, False):
        s = opened(client, f"ids-{idempotent}")(idempotent=idempotent)
        pk = s.pk
        # The first records of a partition: general; then one caller's call whose ids are
        # all new is fast, one record or every shape.
        paths.check(s.call(_ids("a")), "general")
        s.sent()
        assert paths.check(s.call(_ids("b")), "fast").startswith("reply: b'1 T 0 0 ")
        s.sent()
        paths.check(s.call(_ids("c", "d", "e", "f", "g", shapes=True)), "fast")
        s.sent(5)
        paths.check(s.call(_ids("h", "h2")), "fast")
        s.sent(2)
        # A known id, every id known, some known: the general path's (answered, refused).
        assert " 0:1:" in paths.check(s.call(_ids("b")), "general")
        s.sent()
        answer = paths.check(s.call(_ids("b", "c")), "general")
        assert " 0:1:" in answer and ",1:2:" in answer
        s.sent(2)
        assert "DUPLICATE_MESSAGE_ID" in paths.check(s.call(_ids("c", "new")), "general")
        # An aged entry is not known, but judging it is the general path's.
        offset, epoch, _ = raw.hget(pk.message_ids, "a").decode().split(" ")  # type: ignore[union-attr]
        raw.hset(pk.message_ids, "a", f"{offset} {epoch} 1000")
        assert paths.check(s.call(_ids("a")), "general").startswith("reply: b'9 T 0 0 ")
        s.sent()
        # Two callers' calls in one (group commit), or a record without an id: general.
        call = s.call(_ids("i", "j"))
        units = str(call.args[5]).replace("|2", "|1,1")
        two = replace(call, args=(*call.args[:5], units, *call.args[6:]))
        paths.check(two, "general")
        s.sent(2)
        mixed = [fencing.Record(b"no id"), *_ids("k")]
        paths.check(s.call(mixed), "general")
        s.sent(2)
        paths.check(s.call(_ids("l")), "fast")
        s.sent()
        # Keys of another type: refused by the general path.
        for key in (pk.message_ids, pk.message_id_queue):
            c = s.call(_ids("m"))
            before = paths.dump(c.keys)
            raw.delete(key)
            raw.set(key, "x")
            assert "WRONG_TYPE" in paths.check(c, "general")
            paths.restore(c.keys, before)


def test_message_id_window(paths: Paths, client: fencing.Client, raw: redis.Redis) -> None:
    """A full window forgets its oldest ids by count, then a few past their age, on the fast
    path as on the general one."""
    s = opened(client, "idwin", message_id_window=3)()
    pk = s.pk
    paths.check(s.call(_ids("a")), "general")
    s.sent()
    for batch in (("b", "c"), ("d",), ("e", "f", "g", "h")):
        paths.check(s.call(_ids(*batch)), "fast")
        s.sent(len(batch))
        assert raw.llen(pk.message_id_queue) == min(3, s.seq)
    assert sorted(raw.hkeys(pk.message_ids)) == [b"f", b"g", b"h"]
    # An id remembered again after it was forgotten is fast; a forgotten one too.
    paths.check(s.call(_ids("a")), "fast")
    s.sent()

    def aged(ages: list[int]) -> None:
        """Backdates the queue's entries (and their ids) by ``ages`` hours, oldest first."""
        now = paths.time_ms()
        entries = [_text(e).split(" ", 2) for e in raw.lrange(pk.message_id_queue, 0, -1)]
        raw.delete(pk.message_id_queue)
        for (_, o, mid), hours in zip(entries, ages, strict=True):
            t = now - hours * 3_600_000
            raw.rpush(pk.message_id_queue, f"{t} {o} {mid}")
            e = raw.hget(pk.message_ids, mid).decode().split(" ")  # type: ignore[union-attr]
            raw.hset(pk.message_ids, mid, f"{e[0]} {e[1]} {t}")

    # Past their age with room in the window: the aged head goes (a few per call).
    head = raw.lpop(pk.message_id_queue)
    raw.hdel(pk.message_ids, head.decode().split(" ")[2])  # type: ignore[union-attr]
    aged([2, 2])
    c = s.call(_ids("x"))
    before = paths.dump(c.keys)
    paths.check(c, "fast")
    assert _text(raw.lrange(pk.message_id_queue, 0, -1)[0]).endswith(" x")
    paths.restore(c.keys, before)
    # Pushed out by the count, and the next past its age: both forgotten.
    paths.check(s.call(_ids("y", "z")), "fast")
    s.sent(2)
    assert raw.lrange(pk.message_id_queue, 0, -1) and raw.hlen(pk.message_ids) == 2
    # An entry whose id was remembered again since forgets nothing.
    aged([0, 0])
    raw.lset(pk.message_id_queue, 0, "1000 0 z")
    paths.check(s.call(_ids("w", "v")), "fast")
    s.sent(2)
    assert raw.hexists(pk.message_ids, "z")


def test_retention(paths: Paths, client: fencing.Client) -> None:
    s = opened(client, "kept", max_len=3)()
    paths.check(s.call(), "general")
    s.sent()
    for _ in range(3):
        paths.check(s.call(RECORDS), "fast")
        s.sent(4)
    start = paths.raw.hget(s.pk.meta, "start")
    assert start is not None and int(start) > 0
    assert paths.raw.xlen(s.pk.stream) == 3


def test_the_shortest_state_expiry(paths: Paths, client: fencing.Client, raw: redis.Redis) -> None:
    """A partition whose producer state expires after a second (the least a topic takes): a
    state written 1.5 s ago is gone, one written just now is live."""
    topic = client.topic("short", partitions=1, producer_state_ttl=1.0)
    p = topic.producer(lease_ttl=LEASE_TTL)
    p.open()
    s = Sender(topic, p, p._queues[0].standing.next_sequence)
    for _ in range(2):
        paths.check(s.call(), "general" if s.seq == 0 else "fast")
        s.sent()
    pid = str(p.producer_id)
    g, last, _, x, rest = raw.hget(s.pk.pids, pid).decode().split(" ", 4)  # type: ignore[union-attr]
    now = paths.time_ms()
    raw.hset(s.pk.pids, pid, f"{g} {last} {now - 1500} {x} {rest}")
    paths.check(s.call(), "general")  # a fresh start (the fence vouches for it)
    raw.hset(s.pk.pids, pid, f"{g} {last} {now - 500} {x} {rest}")
    paths.check(s.call(), "fast")


def test_the_builder_and_the_reply_parser() -> None:
    """The contract with protocol.topic.append: the header's ten fields in order (ARGV[2]),
    the resend's header (never fresh), and the one-string reply, as bytes or decoded."""
    pk = PartitionKeys(Keys("ns"), "t", 0)
    writer = protocol.topic.Writer("7", "sess", "x", 3, 5000, "rowinc")
    call = protocol.topic.append(
        pk,
        [fencing.Record(b"v", key=b"k")],
        incarnation="inc",
        seen_next=12,
        expected_offset=12,
        writer=writer,
        sequenced=Sequenced(2, 40, None, "writer"),
    )
    inc, header, session, row_inc, checksum, layout, *parts = call.args
    assert dict(zip(HEADER, str(header).split(" "), strict=True)) == {
        "seen_next": "12",
        "epoch": "3",
        "ttl_ms": "5000",
        "pid_gen": "2",
        "first_seq": "40",
        "fresh": "1",
        "expected": "12",
        "mode": "x",
        "producer": "7",
        "name": "writer",
    }
    assert (inc, session, row_inc, layout, parts) == ("inc", "sess", "rowinc", "1", [b"v", b"k"])
    assert call.resent_args is not None
    resent = dict(zip(HEADER, str(call.resent_args[1]).split(" "), strict=True))
    assert resent == {**dict(zip(HEADER, str(header).split(" "), strict=True)), "fresh": "0"}
    assert call.resent_args[2:] == call.args[2:] and call.resent_args[0] == call.args[0]
    assert checksum == protocol.topic.checksum([fencing.Record(b"v", key=b"k")])
    plain = protocol.topic.append(
        pk,
        [fencing.Record(b"v")],
        incarnation="inc",
        seen_next=0,
        expected_offset=None,
        writer=writer,
    )
    assert str(plain.args[1]).split(" ") == ["0", "3", "5000", "0", "", "0", "", "x", "7", ""]
    assert plain.args[4] == "" and not plain.resend_safe
    for reply in (b"12 1795480466103 3 0 3", "12 1795480466103 3 0 3"):
        assert call.parse(reply) == protocol.topic.Appended(12, 1795480466103, 3, False, 3)
    assert call.parse(b"4 5 0 1 -1") == protocol.topic.Appended(4, 5, 0, True, -1)
