"""What a lost checkpoint's recovery stands on, without a Spark session: rows that carry
their source position's message id are skipped one by one when another lineage wrote them,
finished batches keep the highest source positions across batches and lineages, the
refusal tells a takeover from a reset, and the source's options for it."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import fencing
from fencing import _protocol as protocol
from fencing._protocol.sink import CHAIN_START, Chunk, Lineage, chain, source_message_id
from fencing._protocol.topic import EncodedBatch
from fencing._sync.producer import fenced_call
from fencing.spark.plan import AfterSink, parse_options
from tests.support.internals import context_of, metadata_of

from ..support.logs import read_records


def execute(client: fencing.Client, call: Any) -> Any:
    context = context_of(client)
    return context.driver(client.settings.socket_timeout).execute(call, context.budget_default())


def chunk_with_ids(sp: int, rows: list[tuple[bytes, str]]) -> Chunk:
    h, hashes, parts = CHAIN_START, [], []
    for i, (value, _) in enumerate(rows):
        h = chain(h, i, value, None, b"")
        hashes.append(h)
    for value, message_id in rows:
        parts += [value, message_id.encode()]
    layout = "4" * len(rows)
    return Chunk(
        sp, -1, CHAIN_START, list(range(len(rows))), b"".join(hashes),
        EncodedBatch(len(rows), layout, parts, ""),
    )  # fmt: skip


def test_rows_another_lineage_wrote_are_skipped_by_their_ids_and_positions_are_kept(
    client: fencing.Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", 1).open()
    meta = metadata_of(topic)
    pk, inc = meta.partition_keys(0), meta.incarnation_of(0)
    producer = topic.producer()
    producer.open()
    ids = [source_message_id("ns/in/i1/0", o, 0) for o in range(4)]

    def write(lineage: Lineage, rows: list[tuple[bytes, str]]) -> Any:
        return fenced_call(
            producer,
            0,
            lambda w: protocol.sink.append(
                pk, lineage, chunk_with_ids(0, rows), incarnation=inc, seen_next=0, writer=w
            ),
        )

    old = Lineage("app", "q-old", 5, 1)
    execute(client, protocol.sink.begin(pk, old, incarnation=inc, new_lineage=False))
    assert write(old, [(b"a", ids[0]), (b"b", ids[1])]).written == 2
    execute(
        client,
        protocol.sink.finish(
            pk, old, incarnation=inc, rows=2, written=2, positions={"ns/in/i1/0": 1}
        ),
    )
    # The next batch wrote row 2 and died; a new lineage reads rows 2 and 3 again.
    after = Lineage("app", "q-old", 6, 1)
    execute(client, protocol.sink.begin(pk, after, incarnation=inc, new_lineage=False))
    assert write(after, [(b"c", ids[2])]).written == 1
    new = Lineage("app", "q-new", 0, 1)
    begun = execute(client, protocol.sink.begin(pk, new, incarnation=inc, new_lineage=True))
    assert begun.status == "lineage"
    done = write(new, [(b"c", ids[2]), (b"d", ids[3])])
    assert (done.written, done.skipped) == (1, 1)
    execute(
        client,
        protocol.sink.finish(
            pk, new, incarnation=inc, rows=2, written=1, skipped=1, positions={"ns/in/i1/0": 3}
        ),
    )
    producer.close()
    records = read_records(client, "t", 0)
    assert [(r.value, r.message_id) for r in records] == [
        (b"a", ids[0]), (b"b", ids[1]), (b"c", ids[2]), (b"d", ids[3]),
    ]  # fmt: skip
    state = raw.hgetall(pk.sink("app"))
    kept = {k.decode(): v.decode() for k, v in state.items() if k[:1] in (b"o", b"t")}
    assert kept == {"o:ns/in/i1/0": "3", "tw": "3", "tk": "1"}


def test_a_query_whose_app_id_was_taken_over_is_told_its_checkpoint_is_intact(
    client: fencing.Client,
) -> None:
    topic = client.topic("t", 1).open()
    meta = metadata_of(topic)
    pk, inc = meta.partition_keys(0), meta.incarnation_of(0)
    first = Lineage("app", "q-first", 3, 1)
    execute(client, protocol.sink.begin(pk, first, incarnation=inc, new_lineage=False))
    second = Lineage("app", "q-second", 0, 1)
    execute(client, protocol.sink.begin(pk, second, incarnation=inc, new_lineage=True))

    def begin_again(query: str) -> None:
        lineage = Lineage("app", query, 4, 1)
        execute(client, protocol.sink.begin(pk, lineage, incarnation=inc, new_lineage=False))

    with pytest.raises(fencing.CheckpointReset, match="checkpoint is intact"):
        begin_again("q-first")  # restarted on its own checkpoint after the takeover
    with pytest.raises(fencing.CheckpointReset, match="deleted or reset") as reset:
        begin_again("q-third")  # a fresh checkpoint
    assert "my checkpoint is gone" in str(reset.value)


def test_the_source_starts_after_a_sink_and_ends_only_where_its_docs_say() -> None:
    options = parse_options({"topic": "orders", "startingoffsets": "afterSink:events/etl"})
    assert options.starting == AfterSink("events", "etl")
    for bad in ("afterSink:events", "afterSink:/etl"):
        with pytest.raises(fencing.InvalidArgument, match="afterSink:events/etl"):
            parse_options({"topic": "orders", "startingoffsets": bad})
    with pytest.raises(fencing.InvalidArgument, match="would read nothing"):
        parse_options({"topic": "orders", "endingoffsets": "earliest"})
