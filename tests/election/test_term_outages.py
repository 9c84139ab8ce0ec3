"""Term-bound producers when Redis does not answer: a campaign whose guarded topics cannot be
fenced keeps trying within its timeout and then resigns, never announcing the term; a
campaign cancelled while it fences leaves nothing held; the ``send_async`` futures of a term
lost meanwhile fail with the term's end; and a caller's own retry after ``LeaseExpired``
is refused like the first send, nothing sent, until it campaigns again.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

import fencing
from fencing.faults import Proxy

from ..conftest import ServerInfo
from ..support.flavours import Api
from ..support.polling import wait_until, wait_until_async
from ..support.wire import APPEND, evalsha

TERM_FENCE = evalsha("term_fence")


def guard_decisions(client: fencing.Client) -> None:
    """A first term guards the topic ``decisions`` (token 1) and writes ``a`` there."""
    election = client.election("sched", "first", ttl=10.0)
    with election.campaign() as term, term.producer(client.topic("decisions", partitions=1)) as p:
        assert p.send(b"a").epoch == 1
    election.close()


def test_a_campaign_that_cannot_fence_its_topics_retries_then_resigns_unannounced(
    proxied: tuple[Proxy, fencing.Client], client: fencing.Client, raw: redis.Redis
) -> None:
    proxy, pclient = proxied
    guard_decisions(client)
    events: list[str] = []
    election = pclient.election(
        "sched",
        "second",
        ttl=10.0,
        on_elected=lambda t: events.append(f"elected {t.token}"),
        on_revoked=lambda t: events.append(f"revoked {t.token}"),
    )
    # The partition's node is down; the election's row is reachable (renewals go on).
    with proxy.drop_requests(TERM_FENCE, count=None) as down:
        started = time.monotonic()
        with pytest.raises(fencing.Unavailable, match="could not be fenced before the campaign"):
            election.campaign(timeout=1.5)
        # Tried again until the timeout, not given up at the first failure.
        assert time.monotonic() - started >= 1.5
        assert down.hits >= 2
    assert events == []
    assert client.election("sched", "observer").leader() is None  # released, not left to lapse
    owner = client.keys.partition("decisions", 0).owner
    assert raw.hmget(owner, "token", "guard") == [b"1", b"sched"]  # never fenced at token 2
    with election.campaign(timeout=5) as term:
        assert term.token == 3
        assert raw.hmget(owner, "token", "guard") == [b"3", b"sched"]
    assert events == ["elected 3", "revoked 3"]
    election.close()


async def test_a_campaign_cancelled_while_it_fences_leaves_nothing_held(
    aio_api: Api, server: ServerInfo, proxy: Proxy, raw: redis.Redis
) -> None:
    with fencing.Client.from_url(server.url, namespace=aio_api.namespace) as sync_client:
        guard_decisions(sync_client)
    pclient = aio_api.client(proxy.url_for(server.url))
    events: list[str] = []
    election = pclient.election(
        "sched", "second", ttl=10.0, on_elected=lambda t: events.append(f"elected {t.token}")
    )
    with proxy.drop_requests(TERM_FENCE, count=None, close=False) as hole:
        campaign = asyncio.ensure_future(election.campaign(timeout=30))
        await wait_until_async(hole.fired.is_set, timeout=10.0, what="fencing under way")
        campaign.cancel()
        with pytest.raises(asyncio.CancelledError):
            await campaign
    assert events == []
    other = aio_api.client().election("sched", "third", ttl=10.0)
    assert await other.leader() is None  # the cancelled term was released before it raised
    async with other.campaign(timeout=2.0) as term:
        assert term.token == 3
        owner = aio_api.client().keys.partition("decisions", 0).owner
        assert raw.hmget(owner, "token", "session") == [b"3", b""]
    await election.close()
    await other.close()
    await aio_api.close()


def cut_off_until_lost(proxy: Proxy, term: fencing.Leadership) -> None:
    """Black-hole every request of the term's client until the term ends here."""
    with proxy.drop_requests(b"*", count=None, close=False):
        assert wait_until(term.lost.is_set, timeout=5.0, what="the term's renew deadline")
    proxy.sever()


def test_send_async_futures_of_a_term_lost_fail_with_its_end_and_never_land(
    proxied: tuple[Proxy, fencing.Client], client: fencing.Client
) -> None:
    proxy, pclient = proxied
    election = pclient.election("sched", "one", ttl=1.0)
    term = election.campaign()
    topic = pclient.topic("decisions", partitions=1)
    producer = term.producer(topic, linger_ms=60_000)
    assert producer.send(b"a").offset == 0
    futures = [producer.send_async(b"q%d" % i) for i in range(5)]
    cut_off_until_lost(proxy, term)
    reason = term.reason
    assert type(reason) is fencing.LeaseExpired
    for future in futures:
        assert future.exception(timeout=5.0) is reason
    producer.flush()  # nothing left to send (errors go to the futures)
    records = client.topic("decisions").reader(0, "earliest").read(max_records=10)
    assert [(r.value, r.epoch) for r in records] == [(b"a", 1)]
    election.close()


def test_a_retry_after_lease_expired_is_refused_unsent_until_a_new_term(
    proxied: tuple[Proxy, fencing.Client], client: fencing.Client
) -> None:
    proxy, pclient = proxied
    election = pclient.election("sched", "one", ttl=1.0)
    term = election.campaign()
    topic = pclient.topic("decisions", partitions=1)
    producer = term.producer(topic)
    assert producer.send(b"a").offset == 0
    cut_off_until_lost(proxy, term)
    # Reachable again, the term's lease maybe still live by server time, nobody else elected:
    # the caller's retries are refused here all the same, and none reaches the server.
    with proxy.observe(APPEND) as appends:
        for _ in range(3):
            with pytest.raises(fencing.LeaseExpired, match="campaign again"):
                producer.send(b"retry")
        with pytest.raises(fencing.LeaseExpired):
            producer.send_async(b"retry")
        with pytest.raises((fencing.LeaseExpired, fencing.Fenced)):
            term.producer(topic)
    assert appends.hits == 0
    # What the error says to do: campaign again; the new term's producer writes.
    with election.campaign(timeout=5) as term2, term2.producer(topic) as producer2:
        assert (producer2.send(b"b").offset, term2.token) == (1, 2)
    records = client.topic("decisions").reader(0, "earliest").read(max_records=10)
    assert [(r.value, r.epoch) for r in records] == [(b"a", 1), (b"b", 2)]
    election.close()
