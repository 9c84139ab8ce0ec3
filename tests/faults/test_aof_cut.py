"""A restart that loses the last second of writes: the server is killed and restarted from
an append-only file cut back to its size of a second earlier (``aof-load-truncated yes``),
so leases, epochs, duplicate windows and records step back together.

Workload: exclusive producers in every exclusive mode on one partition. Checked:

- ``acks="leader"``: the rollback is never silent. Every acknowledged record missing from
  the log after the restart, or found at another offset or epoch (an offset or epoch used
  again), belongs to a handle that was told ``StateLost`` or that was closed before the
  restart (nobody left to tell: the risk ``acks="leader"`` documents). The log itself
  stays one contiguous segment per epoch (G1, G6) and no value is written twice (G5).
  A producer of another topic sends just before the cut and closes just after it: its
  close() leaves and raises ``StateLost``.
- ``acks="fsync"``: the cut keeps what was fsynced (a machine loses its page cache, not
  its disk): every acknowledged record is in the log at its acknowledged offset
  (``fencing.verify.verify_log`` with every attempt), and that producer's close() is quiet.

One server (Valkey, for WAITAOF). CI runs one short round of each; ``FENCING_SOAK=1`` runs
:data:`SOAK_ROUNDS` rounds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

import fencing
from fencing.verify import verify_log

from ..conftest import SOAK
from ..support.fault_workloads import Producers
from ..support.faulty_servers import AofServer, aof_server
from ..support.logs import read_records
from ..support.polling import wait_until

SOAK_ROUNDS = int(os.environ.get("FENCING_SOAK_ROUNDS", "20"))


def outcome(call: Callable[[], object]) -> BaseException | None:
    """The FencingError ``call`` raised, or None."""
    try:
        call()
    except fencing.FencingError as exc:
        return exc
    return None


def cut_round(store: AofServer, seed: int, acks: str) -> dict[str, object]:
    ns = f"aof-{acks}-{seed}"
    client = fencing.Client.from_url(store.url, namespace=ns)
    try:
        work = Producers(store.url, ns, "excl", workers=3, lease_ttl=1.0, acks=acks)
        quiet = client.topic("quiet", partitions=1).producer(
            fencing.AccessMode.EXCLUSIVE, lease_ttl=60.0, acks=acks
        )
        assert quiet.send(b"q-first").offset == 0
        try:
            began = time.monotonic()
            # (Past the first seconds: the cut lands in the steady state, not the creation.)
            wait_until(
                lambda: len(work.attempts) > 200 and time.monotonic() > began + 2.5,
                timeout=20,
                what="sends",
            )
            # A handle whose last sends the cut loses and whose next call is close().
            quiet.send_batch([fencing.Record(b"q-%d" % i) for i in range(3)], partition=0)
            quiet_acked = time.monotonic()
            cut_at = time.monotonic()
            fsynced = lambda: max(work.last_ack, quiet_acked)  # noqa: E731
            cut = store.cut_back(1.0, fsynced if acks == "fsync" else None)
            restarted = time.monotonic()
            quiet_closed = outcome(quiet.close)
            sent = len(work.attempts)
            wait_until(lambda: len(work.attempts) > sent + 200, timeout=30, what="sends after")
        finally:
            stuck = work.stop()
        assert not stuck, stuck
        assert not work.unexpected, work.unexpected
        if acks == "fsync":
            assert quiet_closed is None, quiet_closed
            report = verify_log(client, "excl", attempts=work.attempts, exclusive=True)
            assert report.ok, report.summary()
            return {"records": report.records, "cut bytes": cut}
        assert isinstance(quiet_closed, fencing.StateLost), quiet_closed
        report = verify_log(client, "excl", attempts=[], exclusive=True, unique_values=True)
        assert report.ok, report.summary()
        where = {r.value: (r.offset, r.epoch) for r in read_records(client, "excl", 0)}
        silent, told = [], 0
        for handle in work.handles:
            lost = [(v, o, e) for v, o, e in handle.acked if where.get(v) != (o, e)]
            if not lost:
                continue
            if handle.state_lost:
                told += 1
            elif handle.closed is None or handle.closed >= cut_at:
                silent.append(
                    (
                        handle.worker,
                        lost[:3],
                        handle.close_error,
                        handle.closed - restarted if handle.closed else None,
                    )
                )
        assert not silent, silent
        return {"records": report.records, "cut bytes": cut, "handles told": told}
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(100)
@pytest.mark.parametrize("acks", ["leader", "fsync"])
def test_a_restart_that_loses_a_second_is_never_silent(acks: str) -> None:
    with aof_server() as store:
        print(cut_round(store, 1, acks))


@pytest.mark.soak
@pytest.mark.timeout(SOAK_ROUNDS * 60)
@pytest.mark.parametrize("acks", ["leader", "fsync"])
def test_aof_cuts_soak(acks: str) -> None:
    assert SOAK
    with aof_server() as store:
        for n in range(SOAK_ROUNDS):
            started = time.monotonic()
            stats = cut_round(store, 3000 + n, acks)
            print(f"aof cut acks={acks} round {n}: {stats} in {time.monotonic() - started:.1f}s")
