"""G9 under failover for owners, consumers and elections (not producers: test_cluster_faults).

A cluster of this module's own (3 masters, 3 replicas). Two kinds of failover:

- a *lossy takeover*: the replica of a shard is stopped and its replication link cut, some
  writes are made on the master only (what a lagging or partitioned replica misses), then
  the replica takes over (``CLUSTER FAILOVER TAKEOVER``, sent while it is still stopped so
  it cannot resync first). The old master becomes its replica: the writes are gone, exactly
  as after a real failover that lost acknowledged writes. Deterministic, and the cluster
  keeps its 3 + 3 shape.
- SIGSTOP of a master past ``cluster-node-timeout`` (its replica is promoted; on SIGCONT it
  rejoins as a replica), and SIGKILL of a master while handles renew (run last).

Each test says what a handle must do when the store loses acknowledged writes under it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import pytest
import redis
from redis.crc import key_slot

import fencing
from fencing._keys import Keys
from fencing._protocol.election import ElectionKeys
from fencing._sync.metadata import metadata_of
from fencing.embedded import EmbeddedCluster, EmbeddedServer

from ..support.cluster_nodes import live_nodes, role_of, shard_of, synced
from ..support.flavours import Api
from ..support.polling import wait_until

T = TypeVar("T")

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("FENCING_TEST_CLUSTER_URL")), reason="starts and kills its own servers"
)

LOST = (fencing.StateLost, fencing.Fenced, fencing.LeaseExpired)


@pytest.fixture(params=["sync", "async"])
def flavor(request: pytest.FixtureRequest, own_cluster: EmbeddedCluster) -> Iterator[Api]:
    """Clients of one flavour on the module's cluster (closed by the conftest's hook)."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)
    yield Api(request.param, own_cluster.url, f"fh-{name}"[-80:])


# -- cluster helpers ------------------------------------------------------------------------


def _cluster_view(*nodes: EmbeddedServer) -> str:
    """What each node thinks of the cluster (for a failure's message)."""
    views = []
    for node in nodes:
        try:
            with redis.Redis(port=node.port, socket_timeout=2, decode_responses=True) as r:
                views.append(f"{node.port}: {r.execute_command('CLUSTER', 'NODES')}")
        except redis.RedisError as exc:
            views.append(f"{node.port}: {exc!r}")
    return "\n".join(views)


def _serves(cluster: EmbeddedCluster, key: str, node: EmbeddedServer) -> bool:
    """Whether every live master's view sends ``key``'s slot to ``node``."""
    slot = key_slot(key.encode())
    for other in live_nodes(cluster):
        try:
            with redis.Redis(port=other.port, socket_timeout=0.5) as r:
                if r.info("replication")["role"] != "master":
                    continue
                table = r.execute_command("CLUSTER", "SLOTS")
        except redis.RedisError:
            continue
        for first, last, primary, *_ in table:
            if first <= slot <= last and int(primary[1]) != node.port:
                return False
    return True


@dataclass
class Cut:
    """A shard whose replica is stopped and cut off: writes made now exist on the master only."""

    cluster: EmbeddedCluster
    key: str
    master: EmbeddedServer
    replica: EmbeddedServer
    done: bool = field(default=False)

    def takeover(self) -> None:
        """The replica takes over, losing what it missed; the old master becomes its replica."""
        # Sent while the replica is stopped: it runs the takeover before it can reconnect
        # to its master and resync (redis-py would wait for a HELLO reply first).
        with socket.create_connection(("127.0.0.1", self.replica.port), timeout=10) as sock:
            sock.sendall(b"*3\r\n$7\r\nCLUSTER\r\n$8\r\nFAILOVER\r\n$8\r\nTAKEOVER\r\n")
            os.kill(self.replica.process.pid, signal.SIGCONT)
            self.done = True
            assert sock.recv(64).startswith(b"+OK"), "CLUSTER FAILOVER TAKEOVER refused"
        wait_until(
            lambda: role_of(self.master) == "slave",
            30,
            0.02,
            what="the old master to step down",
            detail=lambda: _cluster_view(self.master, self.replica),
        )
        wait_until(
            lambda: _serves(self.cluster, self.key, self.replica), 10, 0.02, what="the new slot map"
        )
        wait_until(
            lambda: synced(self.master),
            15,
            0.02,
            what="the old master to resync as a replica of the new",
        )

    def restore(self) -> None:
        if not self.done:
            os.kill(self.replica.process.pid, signal.SIGCONT)
            self.done = True


def _acknowledged_by_replica(master: EmbeddedServer, key: str) -> bool:
    """Does the master count a replica that acknowledges writes (what ``acks='replicated'``
    waits for)? The replica's side saying its link is up is not enough: after a full resync
    the master puts the replica online only at its first acknowledgement."""
    with redis.Redis(port=master.port, socket_timeout=2) as r:
        r.set(f"{key}:healthy-probe", "1")  # ``key`` has a hash tag: the same slot
        return int(r.execute_command("WAIT", 1, 200)) >= 1


def _healthy(cluster: EmbeddedCluster, key: str) -> None:
    """Wait until ``key``'s shard has its replica in sync and acknowledging (an earlier
    test's takeover leaves the old master resyncing as a replica for a moment)."""
    master, replica = shard_of(cluster, key)
    wait_until(lambda: synced(replica), 15, 0.02, what="the shard's replica to be in sync")
    wait_until(
        lambda: _acknowledged_by_replica(master, key),
        15,
        0.02,
        what="the shard's master to count its replica's acknowledgements",
    )


@pytest.fixture
def cut_shard(own_cluster: EmbeddedCluster) -> Iterator[Callable[[str], Cut]]:
    """``cut_shard(key)``: stop the replica of ``key``'s shard and cut its link."""
    cuts: list[Cut] = []

    def make(key: str) -> Cut:
        master, replica = shard_of(own_cluster, key)
        wait_until(
            lambda: synced(replica), 15, 0.02, what="the replica to be in sync before the cut"
        )
        os.kill(replica.process.pid, signal.SIGSTOP)
        cut = Cut(own_cluster, key, master, replica)
        cuts.append(cut)
        with redis.Redis(port=master.port) as m:
            m.execute_command("CLIENT", "KILL", "TYPE", "replica")
            wait_until(
                lambda: m.info("replication")["connected_slaves"] == 0,
                5,
                0.02,
                what="the link to be cut",
            )
        return cut

    yield make
    for cut in cuts:
        cut.restore()
    if cuts:
        # The next test starts on a settled cluster: every live node maps every slot.
        wait_until(
            lambda: _covered(own_cluster), 20, 0.02, what="every live node to map all 16384 slots"
        )


def _retry_short(claim: Callable[[], T]) -> T:
    """``claim()`` again while it is NotEnoughReplicas (given back each time), up to 5 s."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            return claim()
        except fencing.NotEnoughReplicas:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _covered(cluster: EmbeddedCluster) -> bool:
    for node in live_nodes(cluster):
        try:
            with redis.Redis(port=node.port, socket_timeout=1) as r:
                info = str(r.execute_command("CLUSTER", "INFO"))
                table = r.execute_command("CLUSTER", "SLOTS")
        except redis.RedisError:
            return False
        if "cluster_state:ok" not in info:
            return False
        if sum(int(last) - int(first) + 1 for first, last, *_ in table) != 16384:
            return False
    return True


def _owner_key(ns: str, group: str, resource: str) -> str:
    return Keys(ns).ownership(group, resource)


def _election_key(ns: str, name: str) -> str:
    return ElectionKeys.of(Keys(ns), name).target.key


# -- owners: a takeover that loses the grant ------------------------------------------------


async def test_owner_whose_claim_was_lost_reports_state_lost(
    flavor: Api, cut_shard: Callable[[str], Cut]
) -> None:
    """acks='leader': a claim acknowledged by the master only, then a failover that loses
    it. The live handle's check() and renew() raise StateLost (the row is missing), never a
    fresh grant or a silent success; and they keep raising it (nothing was re-created)."""
    client = flavor.client()
    owner = client.ownership("g", "a", ttl=10.0)
    cut = cut_shard(_owner_key(flavor.namespace, "g", "r"))
    grant = (await owner.claim(["r"]))["r"]
    assert grant.token == 1
    await asyncio.to_thread(cut.takeover)
    with pytest.raises(fencing.StateLost):
        await owner.renew()
    assert owner.grants == {}
    with pytest.raises(fencing.StateLost):
        await owner.check("r")
    with pytest.raises(fencing.StateLost):
        await owner.renew(["r"])
    with redis.Redis(port=cut.replica.port) as r:
        assert r.exists(_owner_key(flavor.namespace, "g", "r")) == 0


async def test_a_replicated_claim_short_of_replicas_is_not_held(
    flavor: Api, cut_shard: Callable[[str], Cut]
) -> None:
    """acks='replicated' with the only replica cut off: the claim raises NotEnoughReplicas,
    the handle holds nothing and the row is given back on the master, so another session
    can claim at once; after the takeover nothing of the short claim survives anywhere."""
    client = flavor.client()
    key = _owner_key(flavor.namespace, "g", "r")
    cut = cut_shard(key)
    owner = client.ownership("g", "a", ttl=10.0, acks="replicated")
    with pytest.raises(fencing.NotEnoughReplicas):
        await owner.claim(["r"])
    assert owner.grants == {}
    with redis.Redis(port=cut.master.port, decode_responses=True) as m:
        assert m.hget(key, "session") in (None, "")
    await asyncio.to_thread(cut.takeover)
    other = client.ownership("g", "b", ttl=10.0)
    grant = (await other.claim(["r"]))["r"]
    assert grant.token == 1  # the promoted replica never saw the short claim
    assert owner.grants == {}


def test_a_severed_owner_stays_fenced_when_a_failover_loses_the_takeover(
    own_cluster: EmbeddedCluster, cut_shard: Callable[[str], Cut]
) -> None:
    """A holds r (token 1, replicated). B takes it over with generation=0 (token 2, acks
    'leader', on the master only); A is told at once (its ``severed`` event is set,
    ``on_severed`` ran with token 2). Then a failover loses B's claim: B's handle raises
    StateLost (its token 2 is above the row's 1), and A's handle stays Fenced for good
    (check/renew raise Fenced): once a severed notification for a grant arrived, that grant never
    acts again, so the token never goes backwards."""
    ns = "fh-severed"
    client = fencing.Client.from_url(own_cluster.url, namespace=ns)
    try:
        a = client.ownership("g", "a", ttl=10.0)
        assert a.claim(["r"])["r"].token == 1
        cut = cut_shard(_owner_key(ns, "g", "r"))
        b = client.ownership("g", "b", ttl=10.0)
        assert b.claim(["r"], generation=0)["r"].token == 2
        with pytest.raises(fencing.Fenced):
            a.check("r")  # the master says so, before the failover
        cut.takeover()
        assert a.severed.is_set()
        with pytest.raises(fencing.StateLost):
            b.check("r")
        with pytest.raises(fencing.Fenced):
            a.check("r")
        with pytest.raises(fencing.Fenced):
            a.renew(["r"])
        assert a.grants == {}  # renew() of every grant renews nothing
    finally:
        client.close()


def test_a_renewal_under_acks_replicated_waits_for_a_replica(
    own_cluster: EmbeddedCluster, cut_shard: Callable[[str], Cut]
) -> None:
    """acks='replicated' holds for a lease renewal too (a write the handle, and an election's
    renew deadline, trusts): with the only replica cut off, ``renew()`` raises NotEnoughReplicas
    instead of reporting an extended lease no replica has, which a failover would shorten (shown
    below: after a takeover the promoted row's lease lapses and another session is granted)."""
    ns = "fh-renew"
    client = fencing.Client.from_url(own_cluster.url, namespace=ns)
    try:
        _healthy(own_cluster, _owner_key(ns, "g", "r"))
        a = client.ownership("g", "a", ttl=2.0, acks="replicated")
        # The wait allows 125 ms (half the budget of a 2 s lease): a replica that has just
        # resynced after an earlier test's takeover can be slower than that for a moment.
        claimed = _retry_short(lambda: a.claim(["r"])["r"])
        cut = cut_shard(_owner_key(ns, "g", "r"))
        time.sleep(1.0)
        try:
            renewed = a.renew()["r"]
        except fencing.NotEnoughReplicas:
            return  # right: an undurable renewal is not reported as extended
        assert renewed.lease_expires_ms > claimed.lease_expires_ms + 900
        wait_until(
            lambda: time.time() * 1000 > claimed.lease_expires_ms + 50,
            5,
            0.02,
            what="replica lease end",
        )
        cut.takeover()
        b = client.ownership("g", "b", ttl=2.0)
        assert b.claim(["r"])["r"].token == 2
        believed = a.grants["r"].lease_expires_ms - time.time() * 1000
        pytest.fail(
            f"renew() under acks='replicated' reported a lease {believed:.0f} ms longer than "
            "the one a replica had: after the takeover token 2 was granted while A's handle "
            "still shows a live lease"
        )
    finally:
        client.close()


# -- elections ------------------------------------------------------------------------------


@dataclass
class Timeline:
    """What the election callbacks saw, by time.monotonic()."""

    events: list[tuple[float, str, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def callbacks(self, who: str) -> dict[str, Callable[[fencing.Leadership], None]]:
        def elected(term: fencing.Leadership) -> None:
            with self.lock:
                self.events.append((time.monotonic(), who, "elected", term.token))

        def revoked(term: fencing.Leadership) -> None:
            with self.lock:
                self.events.append((time.monotonic(), who, "revoked", term.token))

        return {"on_elected": elected, "on_revoked": revoked}

    def check(self) -> list[tuple[str, int]]:
        """Terms never overlap, tokens strictly grow, one elected and one revoked per term."""
        with self.lock:
            events = sorted(self.events)
        leading: tuple[str, int] | None = None
        last_token = 0
        terms = []
        for _, who, what, token in events:
            if what == "elected":
                assert leading is None, f"{who} elected (token {token}) while {leading} leads"
                assert token > last_token, f"token {token} after {last_token}: {events}"
                leading, last_token = (who, token), token
                terms.append((who, token))
            else:
                assert leading == (who, token), f"{who} revoked {token} but {leading}: {events}"
                leading = None
        return terms


def test_a_failover_losing_renewals_ends_the_old_term_before_the_next(
    own_cluster: EmbeddedCluster, cut_shard: Callable[[str], Cut]
) -> None:
    """acks='replicated', ttl=3 s, renew_deadline=2 s, retry_period=1.5 s. A is elected (its
    claim waits for the replica), then the replica is cut off. A's renewals now reach the
    master only: they raise NotEnoughReplicas and do not move A's renew deadline (else A would
    lead on while the lease the replica knew lapsed, and only a "severed" notification
    would keep the terms apart). So A steps down at its renew deadline,
    before the replica's lease lapses; then the replica takes over and B is elected with
    token 2. Checked: the callbacks never overlap and tokens grow."""
    ns = "fh-twoleaders"
    timeline = Timeline()
    client_a = fencing.Client.from_url(own_cluster.url, namespace=ns)
    client_b = fencing.Client.from_url(own_cluster.url, namespace=ns)
    opts = {"ttl": 3.0, "renew_deadline": 2.0, "retry_period": 1.5, "acks": "replicated"}
    try:
        _healthy(own_cluster, _election_key(ns, "e"))
        a = client_a.election("e", "a", **opts, **timeline.callbacks("a"))  # type: ignore[arg-type]
        b = client_b.election("e", "b", **opts, **timeline.callbacks("b"))  # type: ignore[arg-type]
        with a.campaign(timeout=5) as term_a:
            cut = cut_shard(_election_key(ns, "e"))
            # No durable renewal: A steps down at its renew deadline (2 s), by itself.
            wait_until(term_a.lost.is_set, 10, 0.02, what="A to step down")
            assert isinstance(term_a.reason, fencing.LeaseExpired), term_a.reason
        cut.takeover()
        with b.campaign(timeout=10) as term_b:
            assert term_b.token == 2
        assert timeline.check() == [("a", 1), ("b", 2)]
    finally:
        client_a.close()
        client_b.close()


# -- consumers ------------------------------------------------------------------------------


def test_a_consumer_whose_commit_was_lost_reports_state_lost(
    own_cluster: EmbeddedCluster, cut_shard: Callable[[str], Cut]
) -> None:
    """A consumer commits offset 2, then (replica cut off) offset 4, acknowledged by the
    master only; a failover loses the second commit. The live consumer then reads
    ``committed(0) == 2`` and commits on as if nothing happened, and a successor would
    re-process records 2..3: the committed offset must never go backwards under a live
    handle without StateLost. The handle remembers what it committed last under its grant,
    commit() checks it is still stored, and committed() too: both raise StateLost."""
    ns = "fh-commit"
    client = fencing.Client.from_url(own_cluster.url, namespace=ns)
    try:
        topic = client.topic("t", partitions=1)
        with topic.producer() as producer:
            for i in range(6):
                producer.send(f"v{i}".encode(), partition=0)
        consumer = topic.consumer("grp", "m", [0])
        assert len(consumer.poll(max_records=2)) == 2
        assert consumer.commit() == {0: 2}
        cut = cut_shard(metadata_of(topic).partition_keys(0).meta)
        assert len(consumer.poll(max_records=2)) == 2
        assert consumer.commit() == {0: 4}
        cut.takeover()
        try:
            seen = consumer.committed(0)
        except fencing.StateLost:
            seen = None
        with pytest.raises(fencing.StateLost):
            consumer.commit({0: 4})
        assert seen is None, f"committed(0) went back from 4 to {seen} without StateLost"
        consumer.close()
    finally:
        client.close()


def test_a_consumer_takes_acks(own_cluster: EmbeddedCluster) -> None:
    """Durability is per producer, per claim and per election. A consumer's claim and its
    commits are claims and writes of the ownership table: ``topic.consumer`` takes
    ``acks=``, and a commit under acks='replicated' is waited for."""
    client = fencing.Client.from_url(own_cluster.url, namespace="fh-cacks")
    try:
        topic = client.topic("t", partitions=1)
        with topic.producer() as producer:
            producer.send(b"v", partition=0)
        _healthy(own_cluster, metadata_of(topic).partition_keys(0).meta)
        consumer = topic.consumer("grp", "m", [0], acks="replicated")
        assert len(consumer.poll()) == 1
        assert consumer.commit() == {0: 1}
        assert consumer.committed(0) == 1
        consumer.close()
    finally:
        client.close()


# -- SIGSTOP, then SIGKILL, of a master (last: they change the cluster's shape) ---------------


def _on_one_shard(cluster: EmbeddedCluster, keys: Callable[[str], list[str]]) -> str:
    """A suffix whose keys (``keys(suffix)``) all live on one shard that has a live master
    and a live replica."""
    shard_of(cluster, keys("x")[0])  # the slot map is settled
    with redis.Redis(port=live_nodes(cluster)[0].port) as r:
        table = r.execute_command("CLUSTER", "SLOTS")
    live = {n.port for n in live_nodes(cluster)}
    for i in range(5000):
        suffix = f"x{i}"
        rows = set()
        for key in keys(suffix):
            slot = key_slot(key.encode())
            for first, last, primary, *replicas in table:
                if first <= slot <= last:
                    ok = int(primary[1]) in live and any(int(x[1]) in live for x in replicas)
                    rows.add((first, ok))
        if len(rows) == 1 and next(iter(rows))[1]:
            return suffix
    raise AssertionError("no names on one healthy shard")


@dataclass
class Watch:
    """Outcomes of one handle's calls, in order: ("ok", token), or ("lost" (StateLost,
    Fenced: permanent), "lapsed" (LeaseExpired: a renewal may revive the same grant) or
    "down" (Unavailable and the like), error)."""

    name: str
    outcomes: list[tuple[str, object]] = field(default_factory=list)

    def run(self, call: Callable[[], int], stop: threading.Event, every: float) -> None:
        while not stop.wait(every):
            try:
                self.outcomes.append(("ok", call()))
            except (fencing.StateLost, fencing.Fenced) as exc:  # permanent for the grant
                self.outcomes.append(("lost", type(exc).__name__))
            except fencing.LeaseExpired as exc:  # lapsed, nobody else granted: renewable
                self.outcomes.append(("lapsed", type(exc).__name__))
            except fencing.FencingError as exc:
                self.outcomes.append(("down", type(exc).__name__))

    def check(self, token: int) -> None:
        """Every success is on the handle's own token, and nothing succeeds after a loss."""
        lost = False
        for kind, value in self.outcomes:
            if kind == "lost":
                lost = True
            elif kind == "ok":
                assert not lost, f"{self.name} acted after it was lost: {self.outcomes}"
                assert value == token, f"{self.name} on token {value}, not {token}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "acks"),
    [("sigstop", "replicated"), ("sigkill", "replicated"), ("sigkill", "leader")],
)
def test_live_handles_across_a_master_failover(
    own_cluster: EmbeddedCluster, fault: str, acks: str
) -> None:
    """An owner renewing, a consumer polling, an elected leader and a waiting candidate, all
    on one shard, and its master is SIGSTOPped past cluster-node-timeout (then SIGCONT: it
    rejoins as a replica) or SIGKILLed; the replica is promoted. Over the whole history: no
    two leaders at once by the callbacks, tokens strictly grow, one elected and one revoked
    callback per term; no handle succeeds after it saw StateLost/Fenced/LeaseExpired, nor on
    a token other than its own; afterwards the election has exactly one leader again, whose
    term is live and whose token is the highest."""
    ns = f"fh-{fault}-{acks}"

    def keys(suffix: str) -> list[str]:
        k = Keys(ns)
        return [
            k.ownership("g", f"r{suffix}"),
            _election_key(ns, f"e{suffix}"),
            k.partition(f"t{suffix}", 0).meta,
        ]

    suffix = _on_one_shard(own_cluster, keys)
    master, replica = shard_of(own_cluster, keys(suffix)[0])
    timeline = Timeline()
    clients = [fencing.Client.from_url(own_cluster.url, namespace=ns) for _ in range(3)]
    stop = threading.Event()
    threads: list[threading.Thread] = []
    terms: dict[str, list[fencing.Leadership]] = {"a": [], "b": []}

    def candidate(client: fencing.Client, who: str) -> None:
        election = client.election(
            f"e{suffix}",
            who,
            ttl=6.0,
            acks=acks,
            **timeline.callbacks(who),  # type: ignore[arg-type]
        )
        while not stop.is_set():
            try:
                with election.campaign(timeout=1.0) as term:
                    terms[who].append(term)
                    while not stop.is_set() and not term.lost.wait(0.05):
                        pass
            except fencing.OwnershipConflict:
                continue  # the campaign timed out: try again
            except fencing.FencingError:
                time.sleep(0.2)  # unreachable during the failover: campaign again
        election.close()

    try:
        owner = clients[0].ownership("g", "o", ttl=6.0, acks=acks)
        token = owner.claim([f"r{suffix}"])[f"r{suffix}"].token
        topic = clients[0].topic(f"t{suffix}", partitions=1)
        with topic.producer() as producer:
            producer.send(b"v", partition=0)
        consumer = topic.consumer("grp", "m", [0], ttl=6.0)
        owner_watch, consumer_watch = Watch("owner"), Watch("consumer")
        threads.append(threading.Thread(target=candidate, args=(clients[1], "a")))
        threads[-1].start()
        wait_until(lambda: terms["a"], 10, 0.02, what="a to be elected")
        threads.append(threading.Thread(target=candidate, args=(clients[2], "b")))
        threads.append(
            threading.Thread(
                target=owner_watch.run,
                args=(lambda: owner.renew([f"r{suffix}"])[f"r{suffix}"].token, stop, 1.0),
            )
        )
        threads.append(
            threading.Thread(
                target=consumer_watch.run,
                args=(lambda: (consumer.poll(max_records=10), 0)[1], stop, 0.5),
            )
        )
        for thread in threads[1:]:
            thread.start()
        time.sleep(0.5)
        if fault == "sigstop":
            os.kill(master.process.pid, signal.SIGSTOP)
            try:
                wait_until(
                    lambda: role_of(replica) == "master",
                    20,
                    0.02,
                    what="the replica to be promoted",
                )
            finally:
                os.kill(master.process.pid, signal.SIGCONT)
            wait_until(
                lambda: role_of(master) == "slave",
                15,
                0.02,
                what="the old master to rejoin as replica",
            )
        else:
            os.kill(master.process.pid, signal.SIGKILL)
            master.process.wait()
            wait_until(
                lambda: role_of(replica) == "master", 20, 0.02, what="the replica to be promoted"
            )
            # Add a replica back (the dead node, restarted from its nodes.conf): with
            # acks='replicated' nobody can be elected on a shard without one (README).
            index = own_cluster.nodes.index(master)
            own_cluster.nodes[index] = EmbeddedServer._launch(
                master.kind, master.binary, master.port, master.directory, master.extra_args
            )
            wait_until(
                lambda: synced(own_cluster.nodes[index]),
                20,
                0.02,
                what="the restarted node to sync",
            )

        def one_live_leader() -> bool:
            live = [t for ts in terms.values() for t in ts if not t.lost.is_set()]
            if len(live) != 1:
                return False
            info = clients[0].election(f"e{suffix}", "observer").leader()
            return info is not None and info.token == live[0].token

        wait_until(one_live_leader, 20, 0.02, what="exactly one live leader, the one the row names")
        after = len(owner_watch.outcomes)
        wait_until(
            lambda: any(k in ("ok", "lost") for k, _ in owner_watch.outcomes[after:]),
            15,
            0.02,
            what="the owner's renewals to succeed again or report a loss",
        )
        stop.set()
        for thread in threads:
            thread.join(30)
        elected = timeline.check()
        assert elected and elected[0] == ("a", 1)
        owner_watch.check(token)
        consumer_watch.check(0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        for client in clients:
            client.close()
