"""G9 for producers: a saved producer state names the partitions' incarnations, so resuming
it on a store that lost its data (or handed the same PID out twice) is StateLost, never a
fresh start that writes a record twice."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

import fencing
from fencing import Client, StateLost
from fencing._sync.metadata import metadata_of

from ..conftest import ServerInfo
from ..support.logs import values_of

PARTITIONS = 2
#: Long: no lease renewal writes anything while a test runs.
LONG_LEASE = 60.0


def partition_snapshot(raw: redis.Redis, topic: fencing.Topic) -> list[bytes | None]:
    """DUMP of every key an append or a PID incarnation writes, on every partition."""
    out: list[bytes | None] = []
    for p in range(topic.partitions):
        pk = metadata_of(topic).partition_keys(p)
        out += [raw.dump(k) for k in (pk.meta, pk.stream, pk.pids, pk.pid_expiry, pk.names)]
    return out


def outcome(call: Callable[[], object]) -> object:
    """What ``call`` returned, or the FencingError it raised."""
    try:
        return call()
    except fencing.FencingError as exc:
        return exc


def test_a_saved_producer_state_names_the_partitions_incarnations(client: Client) -> None:
    topic = client.topic("copy", partitions=PARTITIONS)
    with topic.producer(lease_ttl=LONG_LEASE) as p:
        p.send(b"a", partition=0)
        state = p.state
    incarnations = {p: metadata_of(topic).incarnation_of(p) for p in range(PARTITIONS)}
    assert all(incarnations.values())
    assert dict(state.incarnations) == incarnations
    assert "incarnations" in state.to_dict()
    assert json.loads(state.to_json())["incarnations"] == state.to_dict()["incarnations"]
    assert fencing.ProducerState.from_json(state.to_json()) == state
    assert fencing.ProducerState.from_dict(state.to_dict()) == state


def test_a_state_saved_before_incarnations_were_recorded_still_resumes(client: Client) -> None:
    """A state saved by an earlier version (no ``incarnations``) loads and resumes."""
    topic = client.topic("copy", partitions=PARTITIONS)
    with topic.producer(lease_ttl=LONG_LEASE) as p:
        p.send(b"a", partition=0)
        pid = p.producer_id
        older = json.dumps(
            {
                "generations": {"0": 0, "1": 0},
                "name": None,
                "producer_id": pid,
                "sequences": {"0": 1, "1": 0},
                "topic": "copy",
            }
        )
    state = fencing.ProducerState.from_json(older)
    assert (state.producer_id, state.next_sequence(0)) == (pid, 1)
    with topic.producer(resume=state, lease_ttl=LONG_LEASE) as q:
        assert q.send(b"b", partition=0).offset == 1
    assert values_of(topic, 0) == [b"a", b"b"]


def test_resuming_state_saved_before_the_store_lost_its_data_is_state_lost(
    fresh_server: ServerInfo, namespace: str
) -> None:
    """A job saves its producer state; the server loses everything (FLUSHALL); another
    service recreates the topic and is handed the same PID (the counter restarted). The job
    resuming its state must not take that PID over: StateLost, nothing written, and the
    live producer goes on."""
    url = fresh_server.url
    raw = redis.Redis.from_url(url)
    clients: list[Client] = []

    def new_client() -> Client:
        clients.append(Client.from_url(url, namespace=namespace))
        return clients[-1]

    try:
        job = new_client().topic("copy", partitions=PARTITIONS)
        with job.producer(lease_ttl=LONG_LEASE) as p:
            assert [p.send(b"a%d" % i, partition=i).offset for i in range(PARTITIONS)] == [0, 0]
            saved = p.state.to_json()
            assert p.producer_id == 1
        raw.flushall()  # a server of this test's own
        service = new_client().topic("copy", partitions=PARTITIONS)
        live = service.producer(lease_ttl=LONG_LEASE)
        assert [live.send(b"x%d" % i, partition=i).offset for i in range(PARTITIONS)] == [0, 0]
        assert live.producer_id == 1  # the same PID as in the saved state, at the same
        # sequences on every partition: nothing but the history tells the two apart
        restarted = new_client().topic("copy").open()
        before = partition_snapshot(raw, restarted)
        resumed: list[fencing.Producer] = []

        def resume() -> object:
            try:
                q = restarted.producer(
                    resume=fencing.ProducerState.from_json(saved), lease_ttl=LONG_LEASE
                )
                resumed.append(q)
                q.open()
                return q.send(b"b", partition=0).offset
            except fencing.FencingError as exc:
                return exc

        resumed_answer = resume()
        for q in resumed:
            q.close()
        wrote = partition_snapshot(raw, restarted) != before
        live_answer = outcome(lambda: live.send(b"y", partition=0).offset)
        facts = (isinstance(resumed_answer, StateLost), wrote, live_answer)
        assert facts == (True, False, 1), (
            f"resuming answered {resumed_answer!r}, wrote something: {wrote}, and the live "
            f"producer's next send answered {live_answer!r}"
        )
        assert live.send(b"z", partition=1).offset == 1
        assert (values_of(service, 0), values_of(service, 1)) == ([b"x0", b"y"], [b"x1", b"z"])
        live.close()
    finally:
        for c in clients:
            c.close()
        raw.close()


def test_a_producer_id_handed_out_twice_is_state_lost_not_a_duplicate(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    first = topic.producer()
    assert first.send(b"same").offset == 0
    # A failover loses the counter's INCR but not the partition's state (another shard).
    raw.decr(client.keys.producer_ids())
    second = topic.producer()
    assert second.producer_id == first.producer_id
    with pytest.raises(fencing.StateLost) as info:
        second.send(b"same")  # same PID, sequence 0, same records: was a silent "duplicate"
    assert info.value.reason == "pid-reused"
    assert "counter went backwards" in str(info.value)
    raw.decr(client.keys.producer_ids())
    with pytest.raises(fencing.StateLost, match="counter"):
        topic.producer(name="job")  # a named newcomer would have taken the PID over
    assert first.send(b"next").offset == 1  # the owner is untouched
    assert values_of(topic) == [b"same", b"next"]


def roll_back(raw: redis.Redis, namespace: str) -> Callable[[], None]:
    """A snapshot of every key of the namespace; calling the result puts the store back to
    it, as a restart from a persistence file a second old does."""
    saved = {k: raw.dump(k) for k in raw.scan_iter(f"{namespace}:*")}

    def restore() -> None:
        for k in raw.scan_iter(f"{namespace}:*"):
            if k not in saved:
                raw.delete(k)
        for k, v in saved.items():
            assert v is not None
            raw.restore(k, 0, v, replace=True)

    return restore


@pytest.mark.parametrize("loss", ["offset", "incarnation"])
def test_close_after_the_store_lost_the_last_sends_is_state_lost_and_still_leaves(
    server: ServerInfo, client: Client, raw: redis.Redis, namespace: str, loss: str
) -> None:
    """The last sends are lost under an exclusive producer whose next call is close(): the
    store rolled back (same incarnation, a lower next offset) or the partition was recreated.
    close() leaves the partition all the same (a newcomer opens at once, no lease to wait
    out), then raises StateLost; closing again is quiet."""
    topic = client.topic("t", partitions=1)
    p = topic.producer(fencing.AccessMode.EXCLUSIVE, lease_ttl=LONG_LEASE)
    assert p.send(b"kept").offset == 0
    restore = roll_back(raw, namespace)
    assert [p.send(b"lost-%d" % i).offset for i in range(2)] == [1, 2]
    restore()
    if loss == "incarnation":
        for k in raw.scan_iter(f"{namespace}:*"):
            raw.delete(k)
        with Client.from_url(server.url, namespace=namespace) as other:
            other.topic("t", partitions=1).open()  # another history under the same name
    with pytest.raises(StateLost) as info:
        p.close()
    assert info.value.reason == loss
    p.close()
    with Client.from_url(server.url, namespace=namespace) as later:
        successor = later.topic("t").producer(fencing.AccessMode.EXCLUSIVE, lease_ttl=LONG_LEASE)
        expected = 1 if loss == "offset" else 0
        assert successor.send(b"next").offset == expected
        successor.close()


def test_resuming_state_saved_past_a_rollback_of_the_same_history_is_state_lost(
    server: ServerInfo, client: Client, raw: redis.Redis, namespace: str
) -> None:
    """A copy job saved its state after sends the store then lost (a restart from a
    persistence file a second old: same incarnation, its PID's sequence behind the state).
    Resuming that state is StateLost, writing nothing: never a wedge of refusals, never a
    gap the job goes on past."""
    topic = client.topic("t", partitions=1)
    p = topic.producer(lease_ttl=LONG_LEASE)
    assert p.send_batch([fencing.Record(b"kept")], partition=0)[0].offset == 0
    restore = roll_back(raw, namespace)
    assert p.send_batch([fencing.Record(b"lost")], partition=0)[0].offset == 1
    saved = p.state
    restore()
    outcome(p.close)
    with Client.from_url(server.url, namespace=namespace) as restarted:
        again = restarted.topic("t", partitions=1)
        got = outcome(lambda: again.producer(resume=saved, lease_ttl=LONG_LEASE))
        assert isinstance(got, StateLost), got
        assert values_of(again) == [b"kept"]
