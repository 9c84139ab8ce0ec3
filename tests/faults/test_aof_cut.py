"""A restart that loses the last second of writes: the server is killed and restarted from
an append-only file cut back to its size of a second earlier (``aof-load-truncated yes``),
so leases, epochs, duplicate windows and records step back together.

Workload: exclusive producers in every exclusive mode on one partition. Checked:

- ``acks="leader"``: the rollback is never silent. Every acknowledged record missing from
  the log after the restart, or found at another offset or epoch (an offset or epoch used
  again), belongs to a handle that was told ``StateLost`` or that was closed before the
  restart (nobody left to tell: the risk ``acks="leader"`` documents). The log itself
  stays one contiguous segment per epoch (G1, G6) and no value is written twice (G5).
- ``acks="fsync"``: the cut keeps what was fsynced (a machine loses its page cache, not
  its disk): every acknowledged record is in the log at its acknowledged offset
  (``fencing.verify.verify_log`` with every attempt).

One server (Valkey, for WAITAOF). CI runs one short round of each; ``FENCING_SOAK=1`` runs
:data:`SOAK_ROUNDS` rounds.
"""

from __future__ import annotations

import os
import time

import pytest

import fencing
from fencing.verify import verify_log

from ..conftest import SOAK
from ..support.fault_workloads import Producers
from ..support.faulty_servers import AofServer, aof_server
from ..support.logs import read_records
from ..support.polling import wait_until

SOAK_ROUNDS = int(os.environ.get("FENCING_SOAK_ROUNDS", "20"))


def cut_round(store: AofServer, seed: int, acks: str) -> dict[str, object]:
    ns = f"aof-{acks}-{seed}"
    client = fencing.Client.from_url(store.url, namespace=ns)
    try:
        work = Producers(store.url, ns, "excl", workers=3, lease_ttl=1.0, acks=acks)
        try:
            began = time.monotonic()
            # (Past the first seconds: the cut lands in the steady state, not the creation.)
            wait_until(
                lambda: len(work.attempts) > 200 and time.monotonic() > began + 2.5,
                timeout=20,
                what="sends",
            )
            cut_at = time.monotonic()
            cut = store.cut_back(1.0, (lambda: work.last_ack) if acks == "fsync" else None)
            restarted = time.monotonic()
            sent = len(work.attempts)
            wait_until(lambda: len(work.attempts) > sent + 200, timeout=30, what="sends after")
        finally:
            stuck = work.stop()
        assert not stuck, stuck
        assert not work.unexpected, work.unexpected
        if acks == "fsync":
            report = verify_log(client, "excl", attempts=work.attempts, exclusive=True)
            assert report.ok, report.summary()
            return {"records": report.records, "cut bytes": cut}
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


#: A producer whose last sends were lost and whose next call is close() is told nothing:
#: the close script leaves the partition without the coordination check of G9.
SILENT_CLOSE = pytest.mark.xfail(
    reason="close() after a rollback does not raise StateLost (producer_close has no G9 check)",
    strict=False,
)


@pytest.mark.slow
@pytest.mark.timeout(100)
@pytest.mark.parametrize("acks", [pytest.param("leader", marks=SILENT_CLOSE), "fsync"])
def test_a_restart_that_loses_a_second_is_never_silent(acks: str) -> None:
    with aof_server() as store:
        print(cut_round(store, 1, acks))


@pytest.mark.soak
@pytest.mark.timeout(SOAK_ROUNDS * 60)
@pytest.mark.parametrize("acks", [pytest.param("leader", marks=SILENT_CLOSE), "fsync"])
def test_aof_cuts_soak(acks: str) -> None:
    assert SOAK
    with aof_server() as store:
        for n in range(SOAK_ROUNDS):
            started = time.monotonic()
            stats = cut_round(store, 3000 + n, acks)
            print(f"aof cut acks={acks} round {n}: {stats} in {time.monotonic() - started:.1f}s")
