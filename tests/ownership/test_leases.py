"""Leases by server time: expiry, renew after expiry, waiting claims, severed notifications."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from urllib.parse import urlparse

import pytest
import redis

import fencing
from fencing import Client, Fenced, Grant, LeaseExpired, OwnershipConflict

from ..conftest import ServerInfo
from ..support.clock import server_ms, wait_server_past
from ..support.flavours import Api
from ..support.polling import wait_until


def test_lease_expiry_is_server_time_plus_ttl(client: Client, raw: redis.Redis) -> None:
    owner = client.ownership("journal", "host-a", ttl=7.5)
    before = server_ms(raw)
    grant = owner.claim("r")["r"]
    after = server_ms(raw)
    assert before + 7500 <= grant.lease_expires_ms <= after + 7500


def test_client_clock_is_never_consulted(
    client: Client, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    grant = a.claim("r")["r"]
    # A client whose wall clock is a day ahead still sees a live holder.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86_400)
    b = client.ownership("journal", "host-b", ttl=10)
    with pytest.raises(OwnershipConflict):
        b.claim("r")
    assert a.check("r").token == grant.token


def test_check_after_expiry_is_lease_expired_then_renew_keeps_generation_and_token(
    client: Client, raw: redis.Redis
) -> None:
    owner = client.ownership("journal", "host-a", ttl=0.2)
    grant = owner.claim("r", generation=4)["r"]
    wait_server_past(raw, grant.lease_expires_ms)
    with pytest.raises(LeaseExpired) as info:
        owner.check("r")
    assert info.value.token == grant.token
    assert info.value.expired_ago >= 0
    renewed = owner.renew()["r"]
    assert (renewed.generation, renewed.token) == (4, grant.token)
    assert renewed.lease_expires_ms > grant.lease_expires_ms
    assert owner.check("r").token == grant.token


def test_claim_after_own_expiry_keeps_grant_when_nobody_else_claimed(
    client: Client, raw: redis.Redis
) -> None:
    owner = client.ownership("journal", "host-a", ttl=0.2)
    grant = owner.claim("r")["r"]
    wait_server_past(raw, grant.lease_expires_ms)
    again = owner.claim("r")["r"]
    assert (again.generation, again.token, again.new) == (1, 1, False)


def _waiting_claim(
    client: Client, label: str, resource: str, timeout: float | None
) -> tuple[threading.Thread, list[object]]:
    owner = client.ownership("journal", label, ttl=10)
    out: list[object] = []

    def run() -> None:
        try:
            out.append(owner.claim(resource, wait=True, timeout=timeout)[resource])
        except BaseException as exc:  # reported to the test thread
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_waiting_claim_is_woken_by_release(client: Client, raw: redis.Redis) -> None:
    holder = client.ownership("journal", "host-a", ttl=30)
    held = holder.claim("r")["r"]
    thread, out = _waiting_claim(client, "host-b", "r", timeout=20)
    # The waiter is refused first and then subscribes; wait until it is parked on the channel.
    channel = client.keys.released_channel("journal", "r")
    deadline = time.monotonic() + 10
    while raw.pubsub_shardnumsub(channel)[0][1] == 0:
        assert time.monotonic() < deadline, "waiter never subscribed"
        time.sleep(0.005)
    holder.release()
    thread.join(timeout=15)
    assert not thread.is_alive()
    (grant,) = out
    assert isinstance(grant, Grant)
    assert (grant.generation, grant.token) == (2, 2)
    # Woken by the release, long before the holder's lease would have lapsed.
    assert grant.lease_expires_ms - 10_000 < held.lease_expires_ms


def test_waiting_claim_takes_over_when_the_holder_lease_lapses(
    client: Client, raw: redis.Redis
) -> None:
    holder = client.ownership("journal", "host-a", ttl=0.3)  # never renewed: it "crashed"
    held = holder.claim("r")["r"]
    thread, out = _waiting_claim(client, "host-b", "r", timeout=20)
    thread.join(timeout=15)
    (grant,) = out
    assert isinstance(grant, Grant)
    assert grant.token == 2
    assert grant.lease_expires_ms - 10_000 >= held.lease_expires_ms  # granted after lapse
    with pytest.raises(Fenced):
        holder.renew()


def test_waiting_claim_times_out_with_conflict_and_holds_nothing(client: Client) -> None:
    holder = client.ownership("journal", "host-a", ttl=30)
    holder.claim("r")
    waiter = client.ownership("journal", "host-b", ttl=10)
    with pytest.raises(OwnershipConflict):
        waiter.claim("r", wait=True, timeout=0.3)
    assert waiter.grants == {}
    assert holder.check("r").token == 1


def test_severed_holder_is_notified_promptly(client: Client) -> None:
    seen: list[tuple[str, int, int]] = []
    a = client.ownership("journal", "host-a", ttl=30)
    a.on_severed = lambda grant, new_token: seen.append((grant.resource, grant.token, new_token))
    a.claim(["r", "s"])
    b = client.ownership("journal", "host-b", ttl=30)
    b.claim("s", generation=1)
    assert a.severed.wait(10)
    assert seen == [("s", 1, 2)]
    with pytest.raises(Fenced):
        a.check("s")
    assert a.check("r").token == 1


def test_renew_reports_fenced_after_renewing_the_others(client: Client) -> None:
    a = client.ownership("journal", "host-a", ttl=30)
    a.claim(["r", "s", "t"])
    client.ownership("journal", "host-b", ttl=30).claim("s", generation=0)
    with pytest.raises(Fenced) as info:
        a.renew()
    assert info.value.resource == "s"
    assert sorted(a.grants) == ["r", "t"]
    assert sorted(a.renew()) == ["r", "t"]


def test_close_releases_everything(client: Client, raw: redis.Redis) -> None:
    with client.ownership("journal", "host-a", ttl=30) as owner:
        owner.claim(["r", "s"])
    for name in ("r", "s"):
        assert raw.hget(client.keys.ownership("journal", name), "session") == b""
    other = client.ownership("journal", "host-b", ttl=30)
    assert {g.token for g in other.claim(["r", "s"]).values()} == {2}


def test_a_waiting_claim_rechecks_when_the_release_notification_never_comes(
    server: ServerInfo, namespace: str, client: Client, raw: redis.Redis
) -> None:
    if not server.owned:
        pytest.skip("creates an ACL user")
    user, password = f"nopub-{namespace}", uuid.uuid4().hex
    # A holder whose ACL forbids (S)PUBLISH: its release happens, its notification does not.
    raw.acl_setuser(
        user,
        enabled=True,
        passwords=[f"+{password}"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-publish", "-spublish"],
    )
    url = urlparse(server.url)
    holder_client = Client.from_url(
        f"redis://{user}:{password}@{url.hostname}:{url.port}/0", namespace=namespace
    )
    try:
        holder = holder_client.ownership("g", "holder", ttl=30)
        holder.claim("r")
        out: list[object] = []
        waiter = client.ownership("g", "waiter", ttl=5)

        def wait() -> None:
            try:
                out.append(waiter.claim("r", wait=True, timeout=8))
            except BaseException as exc:
                out.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        channel = client.keys.released_channel("g", "r")
        wait_until(lambda: raw.pubsub_shardnumsub(channel)[0][1] >= 1)
        assert holder.release("r") == {"r": True}
        thread.join(15)
        (result,) = out
        assert isinstance(result, dict), result  # granted long before the 30 s lease
        assert result["r"].token == 2
    finally:
        holder_client.close()
        raw.acl_deluser(user)


async def test_second_waiting_claim_on_a_resource_is_woken_promptly(api: Api) -> None:
    """A waiting claim that follows another, timed-out waiter of the same resource on the same
    client is woken by the release, not by its polling."""
    client = api.client()
    holder = client.ownership("g", "holder", ttl=10.0)
    await holder.claim("r")
    first = client.ownership("g", "first", ttl=10.0)
    with pytest.raises(fencing.OwnershipConflict):
        await first.claim("r", wait=True, timeout=0.3)
    second = client.ownership("g", "second", ttl=10.0)
    started = time.monotonic()
    claim = asyncio.ensure_future(second.claim("r", wait=True, timeout=5))
    await asyncio.sleep(0.1)
    await holder.release()
    await claim
    took = time.monotonic() - started
    await second.close()
    assert took < 1.0, f"a waiting claim took {took:.2f}s to see a release 0.1s in"
