"""A seeded explorer of retries, lost replies, crashes and resumes against a real server.

One seed is one run: a topic of one partition with a duplicate window and a producer-state
expiry drawn from the seed, copy jobs (fresh or named) whose producers send through
:class:`fencing.faults.Proxy`, and a list of steps drawn one by one from the seed and the
model's state: a send (a job's due resend, or new rows) under a fault chosen by request
count (replies or requests lost once or for good, a reply delayed past the socket timeout,
connections reset or refused), an explicit resolve (its own reply lost, or not), a saved
state, a crash (the producer dropped without close, its pending batch never resolved), a
restart (``resume=`` from ANY saved state of the job, the job's name, or the log), a send
by a superseded incarnation (must be fenced), and an idle wait past the expiry. After
every step the answer and the whole log are checked against :mod:`.retries_model`; at the
end every job finishes its rows without faults and the log must hold each row exactly once,
and :func:`fencing.verify.verify_log` must pass (G1 in the exclusive runs, G2, G5, G6).

A failure raises :class:`Finding` naming the seed, the step, the steps so far and the
command that replays it: ``FENCING_EXPLORER_SEED=<seed> pytest
tests/producers/test_retries_explorer.py``.

>>> run_seed(seed, server_url, namespace)                          # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

import fencing
from fencing import AccessMode
from fencing.faults import Proxy
from fencing.verify import Attempt, verify_log

from .clock import server_ms, wait_server_past
from .logs import records_of
from .retries_faults import RESOLVE_FAULTS, SEND_FAULTS, arm, pick
from .retries_model import Batch, Finding, Job, Model, Saved
from .wire import APPEND, RESOLVE

__all__ = ["Finding", "run_seed"]

#: Steps per seed.
STEPS = 70
#: Lease of every producer: a socket step times out after ttl/8, a send's retries end
#: within the lease (3 s: a budget of a second holds on a busy machine; a fault is the
#: schedule's, never the machine's).
LEASE_TTL = 3.0
#: How long an open is tried again when the server does not answer in its budget.
OPEN_PATIENCE = 30.0
#: Most jobs alive in one run.
MAX_JOBS = 3
#: Step kinds and their weights. ``resend-by-id``: a job whose rows carry their input
#: position as message id starts over with no saved state and resends every row it made,
#: with the same ids: what the id window knows is answered as the original, never written
#: twice (sequences cannot help there: a fresh PID).
STEP_WEIGHTS = {
    "send": 46,
    "resolve": 8,
    "save": 10,
    "crash": 9,
    "restart": 14,
    "zombie": 4,
    "idle": 2,
    "new-job": 3,
    "resend-by-id": 4,
}


@dataclass
class Run:
    """One seed's run: the model, the clients and the steps taken."""

    seed: int
    rng: random.Random
    model: Model
    proxy: Proxy
    topic: Any  # through the proxy
    direct: Any  # the same topic, straight to the server
    raw: redis.Redis
    mode: AccessMode
    #: Dropped producers: [producer, its PID, whether a newer incarnation fenced it].
    zombies: list[list[Any]]
    steps: list[str]
    producers: list[Any]

    def note(self, text: str) -> None:
        self.steps[-1] += f" -> {text}"


def _log(run: Run) -> dict[bytes, int]:
    return run.model.check_log(records_of(run.direct))


def _pending_of(producer: Any) -> Any:
    return producer._queues[0].standing.pending


# -- steps ------------------------------------------------------------------------------------


def _open(run: Run, job: Job, **options: Any) -> Any:
    deadline = time.monotonic() + OPEN_PATIENCE
    while True:
        p = run.topic.producer(access_mode=run.mode, lease_ttl=LEASE_TTL, **options)
        try:
            p.open()
            break
        except fencing.Unavailable:
            # The server did not answer within the open's retry budget (a busy machine, not
            # a fault of the schedule): open again, as an application would.
            run.producers.append(p)
            if time.monotonic() > deadline:
                raise
    run.producers.append(p)
    if run.mode is not AccessMode.SHARED:
        # Opened with fencing: every other producer is superseded. They learn it at their
        # next step; the model counts them as crashed now.
        for other in run.model.jobs:
            if other is not job and other.producer is not None:
                _drop(run, other)
        for zombie in run.zombies:
            zombie[2] = True
    for zombie in run.zombies:  # a newer incarnation of the same PID (resume=, name=)
        zombie[2] = zombie[2] or zombie[1] == p.producer_id
    return p


def _drop(run: Run, job: Job) -> None:
    """The job's producer is gone (a crash, or fenced): what it left pending is settled
    from the log."""
    run.model.reconcile(job, _log(run))
    run.zombies.append([job.producer, job.producer.producer_id, False])
    job.producer = None


def _send(run: Run, job: Job) -> None:
    model, p = run.model, job.producer
    due = model.resends(job)
    if job.pending is not None and job.pending.index is not None:
        # The pending resend is settled first, and the producer goes on after it: the job
        # sends what follows it (resending it blindly is the application's own resend,
        # which only message ids can answer).
        due = due[1:]
    batch = due[0] if due else job.take_new(run.rng.randint(1, 3))
    kind = "resend" if due else "new"
    fault = pick(run.rng, SEND_FAULTS)
    pending, was = job.pending, _pending_of(p)
    before = p.last_resolution
    run.steps[-1] += f" {kind} {batch.rows[0].decode()}+{len(batch.rows)} fault={fault}"
    rules = arm(run.proxy, fault, APPEND)
    batch.sent_at = time.monotonic()
    try:
        answer: Any = p.send_batch(job.records(batch.rows), partition=0)
    except fencing.FencingError as exc:
        answer = exc
    finally:
        for rule in rules:
            rule.remove()
    run.note(_shown(answer))
    if pending is not None and _pending_of(p) is not was:
        # The send resolved the pending batch first (and said how in last_resolution).
        resolution = p.last_resolution
        if resolution is before:
            raise Finding("a pending batch was settled without last_resolution saying how")
        result = resolution[1]
        if isinstance(result, fencing.DuplicateSequence):
            _settle(run, job, pending, None, result)  # written before: never "did not land"
        else:
            _settle(run, job, pending, result, None)
    elif pending is not None and isinstance(answer, fencing.FencingError):
        # Settling it failed (unreachable, its state expired...): nothing else was sent.
        run.note("the pending batch was not settled")
        if batch.index is None:
            model.not_landed(job, batch, _log(run))
        if isinstance(answer, fencing.UnknownProducerId) and model.may_have_expired(job.pid):
            _drop(run, job)
        elif not isinstance(answer, fencing.Unavailable | fencing.OutcomeUnknown):
            raise Finding(f"unexpected answer {answer!r} while settling a pending batch")
        return
    _answered(run, job, batch, answer)


def _answered(run: Run, job: Job, batch: Batch, answer: Any) -> None:
    model = run.model
    if isinstance(answer, list):
        model.landed(job, batch, answer)
    elif isinstance(answer, fencing.DuplicateSequence) and (
        answer.reason == "older-than-window" or (job.loose and batch.index is not None)
    ):
        model.skipped(job, batch)
    elif isinstance(answer, fencing.OutcomeUnknown):
        if job.pending is not None:
            raise Finding("OutcomeUnknown while an earlier batch was still pending")
        model.unknown(job, batch)
    elif isinstance(answer, fencing.Unavailable) or (
        isinstance(answer, fencing.UnknownProducerId) and model.may_have_expired(job.pid)
    ):
        # Nothing written (unreachable), or a resend/pending batch whose state may have
        # expired: the job starts over from the log.
        if batch.index is None:
            model.not_landed(job, batch, _log(run))
        if isinstance(answer, fencing.UnknownProducerId):
            _drop(run, job)
    else:
        raise Finding(f"unexpected answer {answer!r}")


def _settle(
    run: Run, job: Job, batch: Batch, result: Any, refused: fencing.DuplicateSequence | None
) -> None:
    """A pending batch was resolved: ``result`` its metadata if it landed."""
    job.pending = None
    if result is not None:
        run.model.landed(job, batch, result)
    elif batch.index is not None or refused is not None:
        run.model.skipped(job, batch)  # a resend refused as older than the window
    else:
        run.model.not_landed(job, batch, _log(run))


def _resolve(run: Run, job: Job) -> None:
    p, batch = job.producer, job.pending
    fault = pick(run.rng, RESOLVE_FAULTS)
    run.steps[-1] += f" fault={fault}"
    rules = arm(run.proxy, fault, RESOLVE)
    try:
        answer: Any = p.resolve(0)
    except fencing.FencingError as exc:
        answer = exc
    finally:
        for rule in rules:
            rule.remove()
    run.note(_shown(answer))
    if isinstance(answer, fencing.DuplicateSequence) and (
        answer.reason == "older-than-window" or (job.loose and batch.index is not None)
    ):
        _settle(run, job, batch, None, answer)
    elif isinstance(answer, fencing.OutcomeUnknown | fencing.Unavailable):
        if _pending_of(p) is None:
            raise Finding(f"resolve raised {answer!r} and left nothing pending")
    elif isinstance(answer, fencing.UnknownProducerId) and run.model.may_have_expired(job.pid):
        _drop(run, job)
    elif answer is None or isinstance(answer, list):
        _settle(run, job, batch, answer, None)
    else:
        raise Finding(f"unexpected resolve answer {answer!r}")


def _restart(run: Run, job: Job) -> None:
    """Resume from any saved state of the job, reopen its name, or start over from the log."""
    model, rng = run.model, run.rng
    choices = ["resume"] * bool(job.saves) * 3 + ["name"] * (job.name is not None) + ["log"]
    how = rng.choice(choices)
    saved: Saved | None = rng.choice(job.saves) if how == "resume" else None
    run.steps[-1] += f" by {how}" + (f" from save {job.saves.index(saved)}" if saved else "")
    options: dict[str, Any] = {}
    if job.name is not None and how != "log":
        options["name"] = job.name
    if saved is not None:
        options["resume"] = saved.state
    try:
        p = _open(run, job, **options)
    except fencing.UnknownProducerId as exc:
        if saved is None or not model.outlived(saved):
            raise Finding(f"restart raised {exc!r}") from exc
        run.note("expired: from the log")
        model.recovered(job, _log(run))
        p = _open(run, job)
        how = "log"
    job.producer = p
    if how == "log":
        model.recovered(job, _log(run))
        model.adopt(job, p.producer_id)
    elif saved is not None:
        if p.producer_id != saved.state.producer_id:
            raise Finding(f"resumed as PID {p.producer_id}, saved {saved.state.producer_id}")
        model.adopt(job, p.producer_id, saved.cursor)
    else:
        model.adopt(job, p.producer_id)  # by name: the server's sequence
    run.note(f"pid {p.producer_id} cursor {job.cursor}/{len(model.lineage(p.producer_id).landed)}")


def _zombie(run: Run) -> None:
    """A superseded incarnation sends: it is fenced, and writes nothing."""
    fenced = [z for z, _, must in run.zombies if must]
    p = run.rng.choice(fenced)
    value = b"zombie-%d" % len(run.model.fenced_values)
    run.model.fenced_values.append(value)
    try:
        p.send_batch([value], partition=0)
    except (fencing.ProducerFenced, fencing.UnknownProducerId) as exc:
        run.note(type(exc).__name__)
    except fencing.FencingError as exc:
        if _pending_of(p) is None:
            raise Finding(f"a superseded incarnation's send raised {exc!r}") from exc
        run.note(f"{type(exc).__name__} (its own pending batch settled first)")
    else:
        raise Finding("a superseded incarnation's send succeeded")
    run.model.attempts.append(Attempt(value, 0, "fenced"))


def _resend_by_id(run: Run, job: Job) -> None:
    """The job starts over with no saved state (a fresh, unnamed producer) and resends every
    row it made with their ids, in batches of 1-3: each answer checked against the ids the
    partition knows just then (see Model.resent_by_id)."""
    model = run.model
    if job.producer is not None:
        _drop(run, job)
    model.recovered(job, _log(run))
    job.producer = p = _open(run, job)
    model.adopt(job, p.producer_id)
    rows = [b"j%d-r%04d" % (job.number, i) for i in range(job.made)]
    batches: list[tuple[bytes, ...]] = []
    while rows:
        n = run.rng.randint(1, 3)
        batches.append(tuple(rows[:n]))
        del rows[:n]
    while batches:
        batch = batches.pop(0)
        records = records_of(run.direct)
        known, log = model.known_ids(records), model.check_log(records)
        try:
            answer: Any = p.send_batch(job.records(batch), partition=0)
        except fencing.FencingError as exc:
            answer = exc
        rest = model.resent_by_id(batch, known, log, answer)
        if rest:  # refused whole: the rows it named are known, the others go again
            batches[:0] = [tuple(batch[i] for i in rest), tuple(b for b in batch if b in known)]
    job.todo.clear()
    run.note(f"pid {p.producer_id}: {job.made} rows resent, {len(model.copies)} rows copied")


def _idle(run: Run) -> None:
    """Wait (by server time) past the producer-state expiry."""
    wait_server_past(run.raw, server_ms(run.raw) + round(run.model.expiry * 1000))


# -- one seed ---------------------------------------------------------------------------------


def _step(run: Run) -> None:
    """Draw one step from the seed and the model's state, take it and check it."""
    model, rng = run.model, run.rng
    live = [j for j in model.jobs if j.producer is not None]
    weights = dict(STEP_WEIGHTS)
    if not live:
        weights.update(send=0, resolve=0, save=0, crash=0)
    if not any(j.pending is not None for j in live):
        weights["resolve"] = 0
    if not any(j.pending is None for j in live):
        weights["save"] = 0
    if not any(j.producer is None for j in model.jobs):
        weights["restart"] = 0
    if not any(fenced for _, _, fenced in run.zombies):
        weights["zombie"] = 0
    if len(model.jobs) >= MAX_JOBS:
        weights["new-job"] = 0
    if model.expiry > 5:
        weights["idle"] = 0
    if not any(j.ids and j.made for j in model.jobs):
        weights["resend-by-id"] = 0
    kind = pick(rng, weights)
    run.steps.append(kind)
    if kind == "new-job":
        job = model.new_job(named=rng.random() < 0.5, ids=rng.random() < 0.5)
        run.note(f"job {job.number}" + (f" named {job.name}" if job.name else ""))
        run.note("with ids" if job.ids else "without ids")
        job.producer = _open(run, job, **({"name": job.name} if job.name else {}))
        model.adopt(job, job.producer.producer_id)
    elif kind == "idle":
        _idle(run)
    elif kind == "zombie":
        _zombie(run)
    elif kind == "resend-by-id":
        job = rng.choice([j for j in model.jobs if j.ids and j.made])
        run.steps[-1] += f" job {job.number}"
        _resend_by_id(run, job)
    elif kind == "restart":
        job = rng.choice([j for j in model.jobs if j.producer is None])
        run.steps[-1] += f" job {job.number}"
        _restart(run, job)
    else:
        pool = {
            "send": live,
            "resolve": [j for j in live if j.pending is not None],
            "save": [j for j in live if j.pending is None],
            "crash": live,
        }[kind]
        job = rng.choice(pool)
        run.steps[-1] += f" job {job.number}"
        if kind == "send":
            _send(run, job)
        elif kind == "resolve":
            _resolve(run, job)
        elif kind == "save":
            job.saves.append(Saved(job.producer.state, job.cursor))
            run.note(f"save {len(job.saves) - 1} at cursor {job.cursor}")
        else:
            _drop(run, job)
    _log(run)


def _finish(run: Run) -> None:
    """Every job sends what it still has to, without faults: then every row is in the log."""
    model = run.model
    for job in model.jobs:
        run.steps.append(f"finish job {job.number}")
        if job.producer is None:
            _restart(run, job)
        if job.pending is not None:
            _resolve(run, job)
        if job.producer is None:  # (its state expired: started over)
            _restart(run, job)
        while job.todo or model.resends(job):
            due = model.resends(job)
            batch = due[0] if due else job.take_new(len(job.todo))
            try:
                answer: Any = job.producer.send_batch(job.records(batch.rows), partition=0)
            except fencing.FencingError as exc:
                answer = exc
            _answered(run, job, batch, answer)
            if job.producer is None:
                _restart(run, job)
        if job.pending is not None:
            raise Finding(f"job {job.number} left a batch pending with no fault armed")
    model.check_complete(records_of(run.direct))


def run_seed(seed: int, server_url: str, namespace: str, steps: int = STEPS) -> int:
    """Run one seed (see the module doc); returns how many steps it took. Raises
    :class:`Finding` with the seed, the steps and how to replay them."""
    rng = random.Random(seed)
    window = rng.choice([1, 2, 3, 5, 5, 8])
    expiry = rng.choice([1.0, 1.0, 7 * 24 * 3600.0])
    mode = rng.choice([AccessMode.SHARED, AccessMode.SHARED, AccessMode.EXCLUSIVE_WITH_FENCING])
    id_window = rng.choice([10_000, 10_000, 3, 6])
    port = int(server_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])
    header = (
        f"seed {seed}: window {window}, expiry {expiry:g} s, {mode.value}, id window {id_window}"
    )
    with Proxy(port) as proxy, redis.Redis.from_url(server_url) as raw:
        client = fencing.Client.from_url(proxy.url_for(server_url), namespace=namespace)
        direct = fencing.Client.from_url(server_url, namespace=namespace)
        name = f"x{seed}"
        topic = client.topic(
            name,
            partitions=1,
            dedup_window=window,
            producer_state_ttl=expiry,
            message_id_window=id_window,
        )
        topic.offsets(0)  # created now, before any fault
        run = Run(
            seed,
            rng,
            Model(window=window, expiry=expiry, id_window=id_window),
            proxy,
            topic,
            direct.topic(name),
            raw,
            mode,
            [],
            [],
            [],
        )
        try:
            for _ in range(steps):
                _step(run)
            _finish(run)
            # Rows written again once their id had left the window are checked by the
            # model; for verify they are values that may repeat.
            copied = run.model.copies
            report = verify_log(
                direct,
                name,
                attempts=[a for a in run.model.attempts if a.value not in copied],
                exclusive=mode is not AccessMode.SHARED,
                unique_values=not copied,
            )
            if not report.ok:
                raise Finding(report.summary())
        except Finding as exc:
            raise Finding(_failure(header, run, exc)) from None
        finally:
            for p in run.producers:
                _quietly(p.close)
            client.close()
            direct.close()
    return len(run.steps)


def _failure(header: str, run: Run, exc: Finding) -> str:
    listed = "\n".join(f"  {i:3d} {s}" for i, s in enumerate(run.steps))
    return (
        f"{header}: {exc}\nat step {len(run.steps) - 1}; the steps:\n{listed}\n"
        f"replay: FENCING_EXPLORER_SEED={run.seed} pytest tests/producers/"
        "test_retries_explorer.py"
    )


def _quietly(fn: Callable[[], object]) -> None:
    with contextlib.suppress(fencing.FencingError):  # a fenced or expired producer closing
        fn()


def _shown(answer: Any) -> str:
    if isinstance(answer, list):
        return f"offsets {[m.offset for m in answer]}"
    if isinstance(answer, fencing.DuplicateSequence):
        return f"DuplicateSequence({answer.reason})"
    return type(answer).__name__ if isinstance(answer, BaseException) else repr(answer)
