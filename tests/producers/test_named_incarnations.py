"""Two processes opening one producer incarnation at the same instant (G5, section 4b).

A copy job restarted twice by its supervisor, or started on two hosts by mistake, opens its
named producer (``name="copy-job"``) or resumes one saved :class:`fencing.ProducerState` in
two processes at once. Whatever the interleaving of their opens across the partitions, once
both opens returned (or one raised ``ProducerFenced``) exactly one of them can write, on every
partition, and the other is fenced on its first send to any partition.

Two real ``spawn``ed worker processes, each with a :class:`fencing.Client` of its own, live for
the entire test and are driven round by round over pipes: in each round both wait on one
barrier and call ``open()`` the moment it releases them, on a topic of :data:`PARTITIONS`
partitions (one script per partition, so the two opens interleave for real). Then each sends
one record to every partition, one process after the other, and reports which sends
succeeded. The logs are read back from Redis.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import multiprocessing.synchronize
import traceback
from dataclasses import dataclass
from typing import Any

import pytest

import fencing

from ..conftest import ServerInfo

pytestmark = [pytest.mark.slow, pytest.mark.one_server]

SPAWN = multiprocessing.get_context("spawn")
#: Partitions of every topic: enough for two opens running side by side to interleave.
PARTITIONS = 48
NAME = "copy-job"
#: Bounds on waits: a process starting (spawn and imports), one step of a round.
START_TIMEOUT = 30.0
STEP_TIMEOUT = 20.0
#: Long: no lease renewal runs inside a round.
LEASE_TTL = 30.0
ROUNDS = 5
SOAK_ROUNDS = 30


# -- the worker process ------------------------------------------------------------------------


def worker(
    url: str,
    namespace: str,
    barrier: multiprocessing.synchronize.Barrier,
    conn: multiprocessing.connection.Connection,
) -> None:
    """Run in a spawned process: open, send and close producers as the test says.

    Commands: ``("open", topic, state_json or None, named)`` (wait on the barrier, then open
    a producer named :data:`NAME` when ``named``, resuming the state when one is given),
    ``("send", tag, descending)`` (one record ``<tag>-<partition>`` to every partition, in
    that order), ``("close",)`` and ``("stop",)``.
    Every command is answered with one message; anything unexpected with ``("error", text)``.
    """
    client = fencing.Client.from_url(url, namespace=namespace)
    producer: fencing.Producer | None = None
    opened = False
    try:
        while True:
            command = conn.recv()
            if command[0] == "stop":
                break
            if command[0] == "open":
                _, topic_name, state_json, named = command
                topic = client.topic(topic_name).open()  # metadata read before the race
                options: dict[str, Any] = {"name": NAME} if named else {}
                if state_json is not None:
                    options["resume"] = fencing.ProducerState.from_json(state_json)
                barrier.wait(STEP_TIMEOUT)
                try:
                    producer = topic.producer(lease_ttl=LEASE_TTL, **options)  # opens it
                    opened = True
                    conn.send(("opened", producer.producer_id))
                except fencing.ProducerFenced as exc:
                    opened = False
                    conn.send(("fenced", repr(exc)))
            elif command[0] == "send":
                _, tag, descending = command
                answers: list[str] = []
                order = range(topic.partitions)
                for p in reversed(order) if descending else order:
                    if not opened:
                        answers.append("fenced at open")
                        continue
                    assert producer is not None
                    try:
                        producer.send(f"{tag}-{p}".encode(), partition=p)
                        answers.append("ok")
                    except fencing.FencingError as exc:
                        answers.append(type(exc).__name__)
                conn.send(("sent", answers))
            elif command[0] == "close":
                if producer is not None:
                    with contextlib.suppress(fencing.FencingError):
                        producer.close()
                producer, opened = None, False
                conn.send(("closed",))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
    finally:
        client.close()


# -- driving the two workers -------------------------------------------------------------------


@dataclass
class Worker:
    label: str
    process: Any  # multiprocessing.context.SpawnProcess
    conn: multiprocessing.connection.Connection

    def ask(self, *command: object, timeout: float = STEP_TIMEOUT) -> tuple[Any, ...]:
        self.conn.send(command)
        return self.answer(timeout)

    def answer(self, timeout: float = STEP_TIMEOUT) -> tuple[Any, ...]:
        if not self.conn.poll(timeout):
            raise AssertionError(f"worker {self.label} did not answer within {timeout}s")
        message: tuple[Any, ...] = self.conn.recv()
        if message[0] == "error":
            raise AssertionError(f"worker {self.label} failed:\n{message[1]}")
        return message


@pytest.fixture
def workers(server: ServerInfo, namespace: str) -> Any:
    barrier = SPAWN.Barrier(2)
    started: list[Worker] = []
    try:
        for label in ("A", "B"):
            ours, theirs = SPAWN.Pipe()
            process = SPAWN.Process(
                target=worker,
                args=(server.url, namespace, barrier, theirs),
                name=f"incarnation-{label}",
                daemon=True,
            )
            process.start()
            theirs.close()
            started.append(Worker(label, process, ours))
        yield started
    finally:
        for w in started:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(("stop",))
        for w in started:
            w.process.join(STEP_TIMEOUT)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(STEP_TIMEOUT)
            w.conn.close()


@dataclass
class Round:
    """What one round's two processes could do."""

    opened: dict[str, tuple[Any, ...]]
    sent: dict[str, list[str]]
    logs: list[list[bytes]]

    def successes(self) -> dict[str, int]:
        return {label: answers.count("ok") for label, answers in self.sent.items()}

    def winner(self) -> str | None:
        """The process that wrote on every partition while the other wrote on none, if so."""
        counts = self.successes()
        (a, na), (b, nb) = counts.items()
        if sorted((na, nb)) != [0, PARTITIONS]:
            return None
        return a if na == PARTITIONS else b

    def describe(self) -> str:
        counts = self.successes()
        first_refusals = {
            label: next((a for a in answers if a != "ok"), None)
            for label, answers in self.sent.items()
        }
        return f"successes per process {counts}, first refusal {first_refusals}"


def race(
    client: fencing.Client,
    pair: list[Worker],
    topic_name: str,
    opens: dict[str, tuple[str | None, bool]],
) -> Round:
    """Both workers open at the same instant, each as ``opens`` says (state JSON or None,
    named or not); then each sends to every partition."""
    for w in pair:
        w.conn.send(("open", topic_name, *opens[w.label]))
    opened = {w.label: w.answer(START_TIMEOUT) for w in pair}
    sent: dict[str, list[str]] = {}
    for w in pair:
        # A in ascending partition order, B descending: once refused, a producer is refused
        # everywhere (ProducerFenced is permanent), so each one's writes show from its end.
        answer = w.ask("send", f"{w.label}-{topic_name}", w.label == "B")
        sent[w.label] = answer[1]
    for w in pair:
        assert w.ask("close") == ("closed",)
    topic = client.topic(topic_name)
    logs = [
        [r.value for r in topic.reader(p, 0).read(max_records=1000, block_ms=0)]
        for p in range(PARTITIONS)
    ]
    return Round(opened, sent, logs)


def check_rounds(client: fencing.Client, pair: list[Worker], rounds: int, mode: str) -> None:
    failures: list[str] = []
    for i in range(rounds):
        topic_name = f"{mode}-{i}"
        topic = client.topic(topic_name, partitions=PARTITIONS).open()
        before: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
        opens: dict[str, tuple[str | None, bool]] = {"A": (None, True), "B": (None, True)}
        if mode in ("resume", "name-and-resume"):
            # The state the job saved: after one record on every partition (of the named
            # producer, when one process opens the name and the other resumes its state).
            named = mode == "name-and-resume"
            saver_options: dict[str, Any] = {"name": NAME} if named else {}
            with topic.producer(lease_ttl=LEASE_TTL, **saver_options) as saver:
                for p in range(PARTITIONS):
                    saver.send(b"saved-%d" % p, partition=p)
                state_json = saver.state.to_json()
            before = [[b"saved-%d" % p] for p in range(PARTITIONS)]
            opens = {"A": (None, True) if named else (state_json, False), "B": (state_json, False)}
        elif i % 2:
            # Every other round the name was held before (a restart), not a first use.
            with topic.producer(name=NAME, lease_ttl=LEASE_TTL) as earlier:
                earlier.open()
        result = race(client, pair, topic_name, opens)
        winner = result.winner()
        if winner is None:
            failures.append(f"round {i}: {result.describe()}")
            continue
        loser = next(label for label in result.sent if label != winner)
        assert set(result.sent[loser]) <= {"ProducerFenced", "fenced at open"}, result.sent
        if result.opened[loser][0] == "fenced":
            assert result.sent[loser] == ["fenced at open"] * PARTITIONS
        expected = [[*before[p], f"{winner}-{topic_name}-{p}".encode()] for p in range(PARTITIONS)]
        assert result.logs == expected, f"round {i}"
    print(f"{mode}: {len(failures)} of {rounds} rounds without exactly one writer")
    assert not failures, (
        f"{len(failures)} of {rounds} rounds ({100 * len(failures) / rounds:.0f}%) let both "
        f"processes write, or neither on every partition:\n" + "\n".join(failures)
    )


#: Both open the name; both resume one saved state; one opens the name while the other
#: resumes the state that name's producer saved.
MODES = ["name", "resume", "name-and-resume"]


@pytest.mark.parametrize("mode", MODES)
def test_two_processes_opening_one_incarnation_at_once_leave_exactly_one_writer(
    client: fencing.Client, workers: list[Worker], mode: str
) -> None:
    check_rounds(client, workers, ROUNDS, mode)


@pytest.mark.soak
@pytest.mark.parametrize("mode", MODES)
def test_two_processes_opening_one_incarnation_at_once_leave_exactly_one_writer_soak(
    client: fencing.Client, workers: list[Worker], mode: str
) -> None:
    check_rounds(client, workers, SOAK_ROUNDS, mode)
