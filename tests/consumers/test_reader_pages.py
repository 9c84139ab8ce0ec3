"""How reads turn stream entries into records (their fast paths), and the position an
iterated reader leaves behind."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import redis

from fencing import Client, Record
from fencing._protocol.reads import _records
from fencing._record import EMPTY_HEADERS, encode_headers


def test_every_layout_and_id_shape_gives_the_same_records(client: Client) -> None:
    pk = client.keys.partition("t", 0)
    h = encode_headers({"x": b"y"})
    entries: list[Any] = [
        [b"0-1", [b"t", b"5", b"e", b"3", b"p", b"17", b"v", b"a"]],
        [b"0-2", [b"t", b"5", b"e", b"3", b"p", b"17", b"v", b"b", b"k", b"kk"]],
        [b"0-3", [b"t", b"6", b"e", b"4", b"p", b"", b"v", b"c", b"h", h]],
        [b"0-4", [b"t", b"6", b"e", b"4", b"p", b"", b"v", b"c", b"h", h, b"k", b"K"]],
        [b"0-5", [b"v", b"d", b"t", b"7", b"e", b"4", b"k", b"kk", b"p", b"9"]],
        [b"0-6", [b"v", b"d", b"t", b"7", b"e", b"4", b"p", b"9"]],
        [b"0-7", {b"t": b"6", b"e": b"4", b"v": b"e"}],
        [b"0-8", [b"t", b"6", b"e", b"4", b"p", b"9", b"v", b"f", b"m", b"id-1"]],
        [b"0-9", [b"t", b"6", b"e", b"4", b"p", b"9", b"v", b"g", b"k", b"K", b"m", b"id-2"]],
        [b"0-10", [b"t", b"6", b"e", b"4", b"p", b"9", b"v", b"h", b"h", h, b"m", b"id-3"]],
        [b"0-11", {b"t": b"6", b"e": b"4", b"v": b"i", b"m": b"id-4"}],
    ]
    reply = list(entries)
    got = _records(pk, reply)
    assert reply == []  # consumed, so each entry's lists are freed as its record is made
    no = EMPTY_HEADERS
    want = [
        Record(b"a", None, no, "t", 0, 0, 3, 17, 5),
        Record(b"b", b"kk", no, "t", 0, 1, 3, 17, 5),
        Record(b"c", None, {"x": b"y"}, "t", 0, 2, 4, None, 6),
        Record(b"c", b"K", {"x": b"y"}, "t", 0, 3, 4, None, 6),
        Record(b"d", b"kk", no, "t", 0, 4, 4, 9, 7),
        Record(b"d", None, no, "t", 0, 5, 4, 9, 7),
        Record(b"e", None, no, "t", 0, 6, 4, None, 6),
        Record(b"f", None, no, "t", 0, 7, 4, 9, 6, "id-1"),
        Record(b"g", b"K", no, "t", 0, 8, 4, 9, 6, "id-2"),
        Record(b"h", None, {"x": b"y"}, "t", 0, 9, 4, 9, 6, "id-3"),
        Record(b"i", None, no, "t", 0, 10, 4, None, 6, "id-4"),
    ]
    assert got == want
    assert all(type(r) is Record for r in got)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].offset = 9  # type: ignore[misc]
    # Offsets come from each ID when the IDs are not consecutive, or not 0-n bytes.
    gaps = [entries[0], [b"0-3", entries[1][1]], [b"0-9", entries[5][1]]]
    assert [r.offset for r in _records(pk, gaps)] == [0, 2, 8]
    text_ids: list[Any] = [["0-4", entries[0][1]], ["0-5", entries[1][1]]]
    assert [r.offset for r in _records(pk, text_ids)] == [3, 4]
    assert _records(pk, []) == []


def test_reads_skip_entries_deleted_behind_the_library(client: Client, r: redis.Redis) -> None:
    topic = client.topic("gaps", partitions=1)
    with topic.producer() as producer:
        producer.send_batch([b"a", b"b", b"c", b"d"], partition=0)
    r.xdel(client.keys.partition("gaps", 0).stream, "0-3")
    records = topic.reader(0).read()
    assert [(x.offset, x.value) for x in records] == [(0, b"a"), (1, b"b"), (3, b"d")]


def test_breaking_out_of_an_iterated_reader_keeps_the_rest(client: Client) -> None:
    topic = client.topic("iter", partitions=1)
    with topic.producer() as producer:
        producer.send_batch([str(i).encode() for i in range(250)], partition=0)
    reader = topic.reader(0)
    for record in reader:
        if record.offset == 41:
            break
    assert reader.position == 42
    assert [x.offset for x in reader.read(max_records=3)] == [42, 43, 44]
    seen = []
    for record in reader:
        seen.append(record.offset)
        if record.offset == 249:
            break
    assert seen == list(range(45, 250))
