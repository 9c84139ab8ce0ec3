"""Racing conditional appends: exactly one winner per offset; losers learn the real next
offset; the final log is contiguous."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter

import redis

import fencing
from fencing import Client, OffsetMismatch

from ..conftest import ServerInfo


def _race_thread(client: Client, name: str, rounds: int, out: list[tuple[str, int, int]]) -> None:
    producer = client.topic("race", partitions=1).producer()
    next_offset = 0
    wins = 0
    while wins < rounds:
        try:
            md = producer.send_batch(
                [f"{name}:{next_offset}:{i}".encode() for i in range(3)],
                expected_offset=next_offset,
            )
        except OffsetMismatch as exc:
            out.append(("lost", next_offset, exc.actual))
            assert exc.actual > next_offset  # the truth only moves forward
            next_offset = exc.actual
            continue
        out.append(("won", md[0].offset, md[-1].offset))
        next_offset = md[-1].offset + 1
        wins += 1


def test_threads_racing_conditional_appends(client: Client, raw: redis.Redis) -> None:
    outcomes: dict[str, list[tuple[str, int, int]]] = {}
    threads = []
    for i in range(6):
        out: list[tuple[str, int, int]] = []
        outcomes[f"w{i}"] = out
        threads.append(threading.Thread(target=_race_thread, args=(client, f"w{i}", 15, out)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    records = client.topic("race").reader(0, 0).read(max_records=10_000)
    check_log(records, outcomes, batches=6 * 15)


def check_log(records: list, outcomes: dict[str, list[tuple[str, int, int]]], batches: int) -> None:  # type: ignore[type-arg]
    # Contiguous offsets; every batch whole and in order, written where its writer expected.
    assert [r.offset for r in records] == list(range(3 * batches))
    for start in range(0, len(records), 3):
        writer, expected, idx = records[start].value.decode().split(":")
        assert (int(expected), int(idx)) == (start, 0)
        for i in (1, 2):
            assert records[start + i].value.decode() == f"{writer}:{expected}:{i}"
    # The race really happened: some writers lost at least once.
    assert any(kind == "lost" for out in outcomes.values() for kind, _, _ in out)
    # Exactly one winner per batch offset, and it is the writer the log shows.
    wins = Counter(first for out in outcomes.values() for kind, first, _ in out if kind == "won")
    assert sorted(wins) == list(range(0, 3 * batches, 3))
    assert set(wins.values()) == {1}
    for name, out in outcomes.items():
        for kind, first, _ in out:
            if kind == "won":
                assert records[first].value.decode().startswith(f"{name}:")
            else:  # a loser was told an offset that the log really reached
                assert first < _ <= len(records)


def _race_process(url: str, namespace: str, name: str, rounds: int, queue: object) -> None:
    client = fencing.Client.from_url(url, namespace=namespace)
    out: list[tuple[str, int, int]] = []
    _race_thread(client, name, rounds, out)
    queue.put((name, out))  # type: ignore[attr-defined]
    client.close()


def test_processes_racing_conditional_appends(server: ServerInfo, namespace: str) -> None:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    client.topic("race", partitions=1).open()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_race_process, args=(server.url, namespace, f"p{i}", 10, queue))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    outcomes = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    records = client.topic("race").reader(0, 0).read(max_records=10_000)
    check_log(records, outcomes, batches=4 * 10)
    client.close()
