"""One worker process of ``tests/faults/test_chaos.py``, run by the suite's
:class:`~tests.support.fleet.Fleet` (:func:`work`), or by hand:
``CHAOS_REDIS_URL=... python -m tests.faults.chaos_worker CONFIG``.

``CONFIG`` is one JSON object (see :class:`Config`); the server URL is given apart (the
``CHAOS_REDIS_URL`` environment variable by hand: never the command line, where ``ps``
shows it).
The worker cycles until the stop file appears (or its own deadline passes), each cycle one
of:

- a **free session**: a producer on a random topic in a random access mode (weighted by
  :data:`MODE_WEIGHTS`; SHARED only on the mixed topic), sometimes with ``name=`` from a
  small pool shared by every worker (a named takeover of another worker's incarnation);
  ``ProducerBusy`` is a normal outcome.
  While it is open, 1-3 threads send batches of 1-3 unique values (``<wid>-<n>``) to random
  partitions for a random while.
- a **copy job** (``resume=``): the best saved :class:`fencing.ProducerState` of a job is
  loaded from the shared directory and the job's deterministic input is sent on from the
  saved position: batch ``i`` of partition ``p`` of job ``J`` is always the same
  :data:`JOB_BATCH` values ``<J>-p<p>-<k>`` (k = the batch's sequence numbers), so a batch
  resent by a newer incarnation is answered from the duplicate window, never appended
  twice. The state is saved after every acknowledged batch.
- with ``fork`` set, sometimes a **fork** while an exclusive producer is open: the child
  tries the parent's producer (it must refuse: ``ProcessBoundError``), opens a new producer
  from the same client and sends a few values, then leaves through the ``with`` block of the
  parent's producer or by calling its ``close()``, and exits with ``os._exit``. The parent
  waits for it (bounded: the child also arms ``alarm``) and then checks that it still holds
  its lease: a send refused with ``ProducerFenced`` whose current epoch is the producer's
  own means the lease was released without a takeover, which only the child can have done.

Every outcome is one JSON line in the worker's own file (``<wid>.jsonl``; a fork child
writes ``<wid>-f<k>.jsonl``), written with a single ``os.write`` on an ``O_APPEND`` file,
so a SIGKILL never leaves half a line and threads never interleave within one:

- ``{"ev": "send", "topic", "p", "v", "o": "acked"|"fenced"|"unknown", "off", "ep", "err"}``
  for every value sent (``o`` is what the sender was told);
- ``{"ev": "open", ...}``, ``{"ev": "busy", ...}``, ``{"ev": "open_failed", ...}``,
  ``{"ev": "closed", ...}`` around sessions;
- ``{"ev": "fork", ...}``, ``{"ev": "fork_check", ...}``, ``{"ev": "child_parent_send", ...}``;
- ``{"ev": "unexpected", "where", "error"}`` for an error the test should fail on;
- ``{"ev": "start"}`` and ``{"ev": "exit"}``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fencing
from fencing import (
    AccessMode,
    DuplicateSequence,
    FencingError,
    OutcomeUnknown,
    ProcessBoundError,
    ProducerBusy,
    ProducerFenced,
    ProducerState,
    Unavailable,
)

from ..support.fleet import Channel

MIXED = "mixed"
EXCL = "excl"
#: How often each access mode is drawn, per topic. SHARED is refused while any exclusive
#: producer or waiter lives, and EXCLUSIVE_WITH_FENCING always wins, so SHARED is drawn
#: often and EXCLUSIVE_WITH_FENCING rarely, to see every mode actually open.
MODE_WEIGHTS = {
    MIXED: {
        AccessMode.SHARED: 0.45,
        AccessMode.WAIT_FOR_EXCLUSIVE: 0.2,
        AccessMode.EXCLUSIVE: 0.2,
        AccessMode.EXCLUSIVE_WITH_FENCING: 0.15,
    },
    EXCL: {
        AccessMode.WAIT_FOR_EXCLUSIVE: 0.45,
        AccessMode.EXCLUSIVE: 0.3,
        AccessMode.EXCLUSIVE_WITH_FENCING: 0.25,
    },
}
#: Records per copy-job batch: every batch of a job has exactly this many, so sequence
#: numbers and batch boundaries are the same for every incarnation of the job.
JOB_BATCH = 2
#: A fork child's own bound (SIGALRM ends it if it hangs); the parent waits a bit longer.
CHILD_ALARM = 5
CHILD_WAIT = CHILD_ALARM + 2.0
#: Errors a send or an open may meet under the chaos without anything being wrong.
EXPECTED_OPEN_ERRORS = (ProducerBusy, ProducerFenced, Unavailable)


@dataclass(frozen=True)
class Config:
    """What the test tells a worker (one JSON object on the command line)."""

    wid: str
    namespace: str
    topics: dict[str, int]
    dir: str
    seed: int
    lease_ttl: float
    wait_timeout: float
    names: list[str]
    jobs: dict[str, str]  # job name -> topic
    fork: bool
    max_seconds: float

    @classmethod
    def from_json(cls, text: str) -> Config:
        return cls(**json.loads(text))


class Log:
    """Appends JSON lines to one file, one ``os.write`` per line."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"ev": ev, "t": time.time(), **fields}, separators=(",", ":"))
        os.write(self.fd, line.encode() + b"\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


class _LeaveChild(Exception):
    """Raised in a fork child to unwind the ``with`` block of the parent's producer."""


class Worker:
    def __init__(self, cfg: Config, client: fencing.Client, log: Log) -> None:
        self.cfg = cfg
        self.client = client
        self.log = log
        self.rng = random.Random(cfg.seed)
        self.dir = Path(cfg.dir)
        self.stop_file = self.dir / "stop"
        self.deadline = time.monotonic() + cfg.max_seconds
        self.counter = itertools.count()
        self.counter_lock = threading.Lock()
        self.sessions = itertools.count()
        self.forks = 0
        self.child_log: Log | None = None
        self.topics = {name: client.topic(name, partitions=n) for name, n in cfg.topics.items()}

    # -- helpers ----------------------------------------------------------------------------

    def mode(self, topic: str, rng: random.Random | None = None) -> AccessMode:
        weights = MODE_WEIGHTS[topic]
        return (rng or self.rng).choices(list(weights), list(weights.values()))[0]

    def stopping(self) -> bool:
        return time.monotonic() > self.deadline or self.stop_file.exists()

    def next_value(self, prefix: str) -> str:
        with self.counter_lock:
            return f"{prefix}-{next(self.counter)}"

    def record(
        self,
        log: Log,
        topic: str,
        partition: int,
        values: Sequence[str],
        outcome: str,
        mds: Sequence[fencing.RecordMetadata] | None = None,
        err: str | None = None,
    ) -> None:
        for i, v in enumerate(values):
            md = mds[i] if mds is not None else None
            log(
                "send",
                topic=topic,
                p=partition if md is None else md.partition,
                v=v,
                o=outcome,
                off=None if md is None else md.offset,
                ep=None if md is None else md.epoch,
                err=err,
            )

    def send(
        self,
        log: Log,
        producer: fencing.Producer,
        partition: int,
        values: Sequence[str],
        where: str,
    ) -> tuple[str, Exception | None]:
        """Send one batch and record its outcome: (acked, fenced, unknown or error, why)."""
        topic = producer.topic.name
        try:
            mds = producer.send_batch([v.encode() for v in values], partition=partition)
        except ProducerFenced as exc:
            self.record(log, topic, partition, values, "fenced", err=describe(exc))
            return "fenced", exc
        except (OutcomeUnknown, Unavailable) as exc:
            self.record(log, topic, partition, values, "unknown", err=describe(exc))
            return "unknown", exc
        except Exception as exc:
            # Not expected of a send under these faults; the values may or may not be in.
            self.record(log, topic, partition, values, "unknown", err=describe(exc))
            log("unexpected", where=where, error=describe(exc))
            return "error", exc
        for md in mds:
            if md.topic != topic or md.partition != partition:
                log("unexpected", where=where, error=f"metadata {md} for partition {partition}")
        self.record(log, topic, partition, values, "acked", mds=mds)
        return "acked", None

    def open(
        self,
        log: Log,
        topic: fencing.Topic,
        mode: AccessMode,
        *,
        name: str | None = None,
        resume: ProducerState | None = None,
        where: str,
    ) -> fencing.Producer | None:
        info: dict[str, Any] = {
            "topic": topic.name,
            "mode": mode.name,
            "name": name,
            "resume": resume is not None,
            "where": where,
        }
        try:
            producer = topic.producer(
                mode,
                name=name,
                lease_ttl=self.cfg.lease_ttl,
                wait_timeout=self.cfg.wait_timeout,
                resume=resume,
            )
        except EXPECTED_OPEN_ERRORS as exc:
            log("busy", **info, error=describe(exc))
            return None
        except Exception as exc:
            log("open_failed", **info, error=describe(exc))
            log("unexpected", where=f"{where} open", error=describe(exc))
            return None
        epochs = [producer.epoch(p) for p in range(topic.partitions)]
        log("open", **info, pid=producer.producer_id, epochs=epochs)
        return producer

    # -- cycles -----------------------------------------------------------------------------

    def run(self) -> None:
        while not self.stopping():
            roll = self.rng.random()
            if self.cfg.jobs and roll < 0.25:
                self.copy_session(self.rng.choice(sorted(self.cfg.jobs)))
            else:
                self.free_session()
            # A short breather between sessions lets waiters and other workers in.
            time.sleep(self.rng.uniform(0.0, 0.05))

    def free_session(self) -> None:
        topic_name = self.rng.choice(sorted(self.topics))
        topic = self.topics[topic_name]
        mode = self.mode(topic_name)
        name = self.rng.choice(self.cfg.names) if self.rng.random() < 0.4 else None
        producer = self.open(self.log, topic, mode, name=name, where="free")
        if producer is None:
            return
        # A fork worker forks at its first exclusive session (so every run forks at least
        # once, however the faults cut its life short), then at half of them.
        fork_now = (
            self.cfg.fork
            and mode is not AccessMode.SHARED
            and (self.forks == 0 or self.rng.random() < 0.5)
            and not self.stopping()
        )
        me = os.getpid()
        try:
            with producer:
                first = self.rng.uniform(0.05, 0.15) if fork_now else self.rng.uniform(0.1, 0.5)
                self.join(self.burst(producer, first))
                if fork_now:
                    # Idle (only the client's own threads run) or while senders send.
                    busy = self.rng.random() < 0.5
                    senders = self.burst(producer, 0.3) if busy else []
                    self.fork(producer, busy)
                    self.join(senders)
                self.join(self.burst(producer, self.rng.uniform(0.1, 0.5)))
        except BaseException as exc:
            if os.getpid() != me:  # a fork child left the parent's `with producer:` block
                if not isinstance(exc, _LeaveChild) and self.child_log is not None:
                    self.child_log("unexpected", where="child leaving", error=describe(exc))
                os._exit(0 if isinstance(exc, _LeaveChild) else 1)
            raise
        self.log("closed", topic=topic_name, fenced=producer.fenced)

    def burst(self, producer: fencing.Producer, seconds: float) -> list[threading.Thread]:
        """Start 1-3 threads sending batches of unique values for ``seconds`` (or fenced)."""
        end = time.monotonic() + seconds
        partitions = producer.topic.partitions
        seeds = [self.rng.randrange(2**32) for _ in range(self.rng.randint(1, 3))]

        def sender(seed: int) -> None:
            rng = random.Random(seed)
            fenced = 0
            while time.monotonic() < end and fenced < 2 and not self.stopping():
                values = [self.next_value(self.cfg.wid) for _ in range(rng.randint(1, 3))]
                partition = rng.randrange(partitions)
                outcome, _ = self.send(self.log, producer, partition, values, "free")
                if outcome in ("fenced", "error"):
                    fenced += 1  # one more try: it must be refused too, without landing
                time.sleep(rng.uniform(0.0, 0.01))

        threads = [
            threading.Thread(target=sender, args=(s,), name=f"sender-{i}", daemon=True)
            for i, s in enumerate(seeds)
        ]
        for t in threads:
            t.start()
        return threads

    @staticmethod
    def join(threads: list[threading.Thread]) -> None:
        for t in threads:
            t.join()

    # -- copy jobs (resume=) ------------------------------------------------------------------

    def job_files(self, job: str) -> list[Path]:
        return sorted(self.dir.glob(f"job-{job}-*.json"))

    def best_state(self, job: str) -> ProducerState:
        """The newest saved state of ``job``: highest generations, then most progress."""
        states = []
        for path in self.job_files(job):
            with contextlib.suppress(OSError, ValueError, FencingError):
                states.append(ProducerState.from_json(path.read_text()))
        return max(
            states,
            key=lambda s: (sum(s.generations.values()), sum(s.sequences.values())),
        )

    def save_state(self, job: str, tag: str, state: ProducerState) -> None:
        path = self.dir / f"job-{job}-{tag}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(path)  # atomic: a reader sees the old state or the new one

    def copy_session(self, job: str) -> None:
        topic = self.topics[self.cfg.jobs[job]]
        mode = self.mode(topic.name)
        state = self.best_state(job)
        producer = self.open(self.log, topic, mode, resume=state, where=f"job {job}")
        if producer is None:
            return
        tag = f"{self.cfg.wid}-{next(self.sessions)}"
        with producer:
            for _ in range(self.rng.randint(3, 12)):
                if self.stopping() or not self.copy_batch(job, producer, tag):
                    break
        self.log("closed", topic=topic.name, job=job, fenced=producer.fenced)

    def copy_batch(self, job: str, producer: fencing.Producer, tag: str) -> bool:
        """Send the job's next batch on a random partition; False to end the session."""
        partition = self.rng.randrange(producer.topic.partitions)
        first = producer.state.next_sequence(partition)
        if first % JOB_BATCH:
            self.log("unexpected", where=f"job {job}", error=f"next sequence {first}")
            return False
        values = [f"{job}-p{partition}-{first + j}" for j in range(JOB_BATCH)]
        topic = producer.topic.name
        try:
            mds = producer.send_batch([v.encode() for v in values], partition=partition)
        except (ProducerFenced, OutcomeUnknown, Unavailable) as exc:
            # A job's values are resent by whoever resumes the job next, so "fenced" here
            # is not "never in the log": the same value may land later, once.
            self.record(self.log, topic, partition, values, "unknown", err=describe(exc))
            if isinstance(exc, ProducerFenced):
                return False
            try:
                mds_or_none = producer.resolve(partition)
            except FencingError as res_exc:
                self.log("resolve_failed", job=job, error=describe(res_exc))
                return False
            if mds_or_none is None:
                return True  # it did not land (and never will): the same batch goes again
            mds = mds_or_none
        except DuplicateSequence as exc:
            if exc.reason != "older-than-window":
                self.record(self.log, topic, partition, values, "unknown", err=describe(exc))
                self.log("unexpected", where=f"job {job}", error=describe(exc))
                return False
            # Written before (by an incarnation whose state this one resumed behind): the
            # recipe skips it, and the producer goes on with the next batch.
            self.record(self.log, topic, partition, values, "unknown", err=describe(exc))
            self.save_state(job, tag, producer.state)
            return True
        except Exception as exc:
            self.record(self.log, topic, partition, values, "unknown", err=describe(exc))
            self.log("unexpected", where=f"job {job}", error=describe(exc))
            return False
        self.record(self.log, topic, partition, values, "acked", mds=mds)
        self.save_state(job, tag, producer.state)
        return True

    # -- fork -----------------------------------------------------------------------------------

    def fork(self, producer: fencing.Producer, busy: bool) -> None:
        """Fork while ``producer`` (exclusive) is open; the child must not touch its lease."""
        self.forks += 1
        k = self.forks
        other = [t for t in sorted(self.topics) if t != producer.topic.name]
        # Mostly a producer on another topic (the parent's lease must then be untouched);
        # sometimes a takeover of the parent's own topic from the child.
        takeover = not other or self.rng.random() < 0.25
        child_topic = producer.topic.name if takeover else self.rng.choice(other)
        child_mode = AccessMode.EXCLUSIVE_WITH_FENCING if takeover else self.mode(child_topic)
        how = self.rng.choice(["with", "close"])
        child_seed = self.rng.randrange(2**32)
        fenced_before = producer.fenced
        pid = os.fork()
        if pid == 0:
            self.child(producer, k, child_topic, child_mode, how, child_seed)  # never returns
        info = {
            "child": pid,
            "k": k,
            "busy": busy,
            "topic": producer.topic.name,
            "child_topic": child_topic,
            "child_mode": child_mode.name,
            "how": how,
        }
        status = self.wait_child(pid)
        self.log("fork", **info, status=status)
        if fenced_before:
            self.log("fork_check", **info, result="fenced_before")
            return
        # Does the parent still hold its lease? A refusal at its own epoch means the lease
        # was released (no takeover happened: a takeover moves the epoch).
        for p in range(producer.topic.partitions):
            value = self.next_value(self.cfg.wid)
            outcome, exc = self.send(self.log, producer, p, [value], "fork check")
            if isinstance(exc, ProducerFenced):
                current = exc.current_epoch
                result = "released" if current == exc.epoch else "taken_over"
                where = {"p": exc.partition, "epoch": exc.epoch, "current": current}
                self.log("fork_check", **info, **where, result=result)
                break
            self.log("fork_check", **info, p=p, result=outcome)

    def wait_child(self, pid: int) -> str:
        deadline = time.monotonic() + CHILD_WAIT
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.WIFSIGNALED(status):
                    return f"signal {os.WTERMSIG(status)}"
                return f"exit {os.WEXITSTATUS(status)}"
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return "hung"

    def child(
        self,
        parent: fencing.Producer,
        k: int,
        topic_name: str,
        mode: AccessMode,
        how: str,
        seed: int,
    ) -> None:
        """The fork child's whole life; leaves through ``os._exit`` only."""
        code = 0
        try:
            signal.alarm(CHILD_ALARM)  # default action: end the process if it hangs
            log = self.child_log = Log(self.dir / f"{self.cfg.wid}-f{k}.jsonl")
            log("child_start", pid=os.getpid(), topic=topic_name, mode=mode.name, how=how)
            prefix = f"{self.cfg.wid}f{k}"
            rng = random.Random(seed)
            # 1. The parent's producer refuses to be used here (no I/O, no send).
            value = f"{prefix}-parent"
            was_fenced = parent.fenced  # then it refuses at once, knowing it: no I/O either
            try:
                mds = parent.send_batch([value.encode()], partition=0)
            except ProcessBoundError as exc:
                log("child_parent_send", result="refused", error=describe(exc))
            except ProducerFenced as exc:
                self.record(log, parent.topic.name, 0, [value], "fenced", err=describe(exc))
                result = "refused" if was_fenced else "fenced"
                log("child_parent_send", result=result, error=describe(exc))
            except Exception as exc:
                self.record(log, parent.topic.name, 0, [value], "unknown", err=describe(exc))
                log("child_parent_send", result="other", error=describe(exc))
            else:
                self.record(log, parent.topic.name, 0, [value], "acked", mds=mds)
                log("child_parent_send", result="sent")
            # 2. A new producer from the same client works here.
            new = self.open(log, self.topics[topic_name], mode, where="child")
            if new is not None:
                with new:
                    counter = itertools.count()
                    for _ in range(5):
                        values = [f"{prefix}-{next(counter)}" for _ in range(rng.randint(1, 2))]
                        partition = rng.randrange(new.topic.partitions)
                        if self.send(log, new, partition, values, "child")[0] == "fenced":
                            break
                log("child_closed", fenced=new.fenced)
            # 3. Leave the parent's producer: with-block unwinding or close(), no I/O.
            log("child_leaving", how=how)
            if how == "close":
                parent.close()
            else:
                raise _LeaveChild
        except _LeaveChild:
            raise  # unwinds the parent's `with producer:`; free_session calls os._exit(0)
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                log("unexpected", where="child", error=describe(exc))
            code = 1
        os._exit(code)


def work(channel: Channel, config: str, url: str, stderr: str) -> None:
    """The worker's entry point in a fleet: its standard error goes to the file ``stderr``
    (the test shows it when the worker fails), its exit status is :func:`main`'s."""
    with open(stderr, "ab", buffering=0) as err:
        os.dup2(err.fileno(), 2)
    code = main([config], url)
    if code:
        sys.exit(code)


def main(argv: Sequence[str], url: str | None = None) -> int:
    cfg = Config.from_json(argv[0])
    url = url or os.environ["CHAOS_REDIS_URL"]
    log = Log(Path(cfg.dir) / f"{cfg.wid}.jsonl")
    log("start", pid=os.getpid())
    client = fencing.Client.from_url(url, namespace=cfg.namespace)
    worker = Worker(cfg, client, log)
    try:
        worker.run()
    except Exception as exc:
        log("unexpected", where="worker", error=describe(exc))
        return 1
    finally:
        client.close()
    log("exit", forks=worker.forks)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
