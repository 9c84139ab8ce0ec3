"""Every row of the ownership table through the public API."""

from __future__ import annotations

import pytest
import redis

import fencing
from fencing import Client, Fenced, OwnershipConflict, StaleGeneration
from fencing._keys import slot_of

from ..support.clock import wait_server_past


def row(raw: redis.Redis, client: Client, group: str, resource: str) -> dict[str, str]:
    data = raw.hgetall(client.keys.ownership(group, resource))
    return {k.decode(): v.decode() for k, v in data.items()}


def test_first_claim_ever_is_generation_1_token_1(client: Client, raw: redis.Redis) -> None:
    owner = client.ownership("journal", "host-a", ttl=10)
    grant = owner.claim(["orders/0"])["orders/0"]
    assert (grant.generation, grant.token, grant.new) == (1, 1, True)
    stored = row(raw, client, "journal", "orders/0")
    assert stored["session"] == owner.session
    assert stored["label"] == "host-a"
    assert (stored["gen"], stored["token"]) == ("1", "1")
    assert stored["inc"] == grant.incarnation
    assert int(stored["expires"]) == grant.lease_expires_ms


def test_own_session_keeps_generation_token_and_extends(client: Client) -> None:
    owner = client.ownership("journal", "host-a", ttl=10)
    first = owner.claim("orders/0")["orders/0"]
    again = owner.claim("orders/0")["orders/0"]
    assert (again.generation, again.token, again.new) == (1, 1, False)
    assert again.incarnation == first.incarnation
    assert again.lease_expires_ms >= first.lease_expires_ms


def test_another_live_session_conflicts(client: Client, raw: redis.Redis) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    b = client.ownership("journal", "host-b", ttl=10)
    a.claim("orders/0")
    before = row(raw, client, "journal", "orders/0")
    with pytest.raises(OwnershipConflict) as info:
        b.claim("orders/0")
    assert info.value.holder_label == "host-a"
    assert info.value.holder_token == 1
    assert 0 < info.value.remaining <= 10
    assert (info.value.group, info.value.resource) == ("journal", "orders/0")
    assert row(raw, client, "journal", "orders/0") == before
    assert b.grants == {}


def test_stale_generation_changes_nothing(client: Client, raw: redis.Redis) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    b = client.ownership("journal", "host-b", ttl=10)
    a.claim("orders/0", generation=5)
    before = row(raw, client, "journal", "orders/0")
    with pytest.raises(StaleGeneration) as info:
        b.claim("orders/0", generation=4)
    assert (info.value.current, info.value.requested) == (5, 4)
    assert row(raw, client, "journal", "orders/0") == before
    a.check("orders/0")  # the holder is untouched


@pytest.mark.parametrize("gen", [1, 2, 7])
def test_generation_at_or_above_severs_live_holder(client: Client, gen: int) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    b = client.ownership("journal", "host-b", ttl=10)
    a.claim("orders/0")  # G = 1
    grant = b.claim("orders/0", generation=gen)["orders/0"]
    assert (grant.generation, grant.token) == (gen, 2)
    with pytest.raises(Fenced) as info:
        a.check("orders/0")
    assert (info.value.token, info.value.holder_token, info.value.holder_label) == (
        1,
        2,
        "host-b",
    )
    assert b.check("orders/0").token == 2


def test_generation_zero_always_wins_and_resets(client: Client) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    b = client.ownership("journal", "host-b", ttl=10)
    a.claim("orders/0", generation=9)
    grant = b.claim("orders/0", generation=0)["orders/0"]
    assert (grant.generation, grant.token) == (0, 2)
    with pytest.raises(Fenced):
        a.renew()
    # G restarts from 0: a positive generation is no longer stale...
    c = client.ownership("journal", "host-c", ttl=10)
    third = c.claim("orders/0", generation=1)["orders/0"]
    assert (third.generation, third.token) == (1, 3)


def test_tokens_keep_growing_across_generation_zero_resets(client: Client) -> None:
    tokens: list[int] = []
    generations: list[int] = []
    for i in range(6):
        owner = client.ownership("journal", f"host-{i}", ttl=10)
        grant = owner.claim("r", generation=0 if i % 2 else None)["r"]
        tokens.append(grant.token)
        generations.append(grant.generation)
        owner.release()
    assert tokens == [1, 2, 3, 4, 5, 6]
    assert generations == [1, 0, 1, 0, 1, 0]


def test_same_owner_id_two_handles_never_share_a_grant(client: Client) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    b = client.ownership("journal", "host-a", ttl=10)
    assert a.session != b.session
    a.claim("orders/0")
    with pytest.raises(OwnershipConflict):
        b.claim("orders/0")
    grant = b.claim("orders/0", generation=1)["orders/0"]
    assert grant.token == 2  # a new session: the token grew even with the same label
    with pytest.raises(Fenced):
        a.check("orders/0")


def test_free_after_release_takes_next_generation(client: Client, raw: redis.Redis) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    a.claim("orders/0")
    assert a.release() == {"orders/0": True}
    stored = row(raw, client, "journal", "orders/0")
    assert (stored["session"], stored["gen"], stored["token"]) == ("", "1", "1")
    b = client.ownership("journal", "host-b", ttl=10)
    grant = b.claim("orders/0")["orders/0"]
    assert (grant.generation, grant.token) == (2, 2)
    assert a.release(["orders/0"]) == {"orders/0": False}


def test_lapsed_lease_taken_by_another_session(client: Client, raw: redis.Redis) -> None:
    a = client.ownership("journal", "host-a", ttl=0.2)
    grant = a.claim("orders/0")["orders/0"]
    wait_server_past(raw, grant.lease_expires_ms)
    b = client.ownership("journal", "host-b", ttl=10)
    taken = b.claim("orders/0")["orders/0"]
    assert (taken.generation, taken.token) == (2, 2)
    with pytest.raises(Fenced):
        a.renew()
    with pytest.raises(Fenced):  # permanent for that grant, even without a round trip
        a.check("orders/0")


def test_multi_resource_claim_is_undone_when_one_is_refused(
    client: Client, raw: redis.Redis
) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    b = client.ownership("journal", "host-b", ttl=10)
    a.claim("orders/3")
    with pytest.raises(OwnershipConflict) as info:
        b.claim(["orders/1", "orders/2", "orders/3", "orders/4"])
    assert info.value.resource == "orders/3"
    assert b.grants == {}
    for name in ("orders/1", "orders/2", "orders/4"):
        stored = row(raw, client, "journal", name)
        assert stored.get("session", "") == "", name
    assert a.check("orders/3").token == 1


# "ra" sorts before "rb" in hash-slot order: the claim below meets them in that order.
SLOT_ORDERS = [("ra", "rb"), ("rb", "ra")]


@pytest.mark.parametrize(("low", "high"), SLOT_ORDERS)
def test_a_claim_refused_as_stale_severs_no_holder_and_changes_no_generation(
    client: Client, raw: redis.Redis, low: str, high: str
) -> None:
    """X holds ``low`` at generation 3, Y holds ``high`` at 10: a claim of both at 5 is
    refused, in either slot order, before it touches ``low``."""
    assert slot_of(client.keys.ownership("journal", "ra")) < slot_of(
        client.keys.ownership("journal", "rb")
    )
    x = client.ownership("journal", "host-x", ttl=10)
    y = client.ownership("journal", "host-y", ttl=10)
    x.claim(low, generation=3)
    y.claim(high, generation=10)
    z = client.ownership("journal", "host-z", ttl=10)
    with pytest.raises(StaleGeneration) as info:
        z.claim([low, high], generation=5)
    err = info.value
    assert (err.group, err.resource, err.current, err.requested) == ("journal", high, 10, 5)
    stored = {name: row(raw, client, "journal", name) for name in (low, high)}
    assert (stored[low]["session"], stored[low]["label"]) == (x.session, "host-x")
    assert (stored[low]["gen"], stored[low]["token"]) == ("3", "1")
    assert (stored[high]["session"], stored[high]["label"]) == (y.session, "host-y")
    assert (stored[high]["gen"], stored[high]["token"]) == ("10", "1")
    assert z.grants == {}
    assert err.granted == {}
    assert err.refused == {high: err}
    assert (x.check(low).generation, x.check(low).token) == (3, 1)
    assert (y.check(high).generation, y.check(high).token) == (10, 1)
    # X restarted (a new session) still claims at its own generation.
    restarted = client.ownership("journal", "host-x", ttl=10)
    again = restarted.claim(low, generation=3)[low]
    assert (again.generation, again.token, again.new) == (3, 2, True)


def test_a_stale_claim_names_every_resource_refused(client: Client, raw: redis.Redis) -> None:
    y = client.ownership("journal", "host-y", ttl=10)
    y.claim(["ra", "rb"], generation=8)
    y.claim("rc", generation=2)
    z = client.ownership("journal", "host-z", ttl=10)
    with pytest.raises(StaleGeneration) as info:
        z.claim(["rc", "rb", "ra"], generation=5)
    err = info.value
    stored = row(raw, client, "journal", "rc")
    assert (stored["session"], stored["gen"], stored["token"]) == (y.session, "2", "1")
    assert err.resource == "ra"  # the first in slot order
    assert sorted(err.refused) == ["ra", "rb"]
    assert [(e.resource, e.current, e.requested) for e in err.refused.values()] == [
        ("ra", 8, 5),
        ("rb", 8, 5),
    ]
    assert err.granted == {}
    assert z.grants == {}


def test_groups_are_independent(client: Client) -> None:
    a = client.ownership("journal", "host-a", ttl=10)
    b = client.ownership("billing", "host-b", ttl=10)
    assert a.claim("orders/0")["orders/0"].token == 1
    assert b.claim("orders/0")["orders/0"].token == 1


def test_grant_is_a_frozen_slotted_dataclass(client: Client) -> None:
    grant = client.ownership("journal", "host-a", ttl=10).claim("x")["x"]
    assert isinstance(grant, fencing.Grant)
    assert not hasattr(grant, "__dict__")
    with pytest.raises(AttributeError):
        grant.token = 5  # type: ignore[misc]
