"""G9 for the ownership table: a row that vanished (FLUSHALL), was recreated by another
incarnation, or went back to an older token is StateLost for the handle that saw it, never
a fresh start, and nothing is written."""

from __future__ import annotations

import pytest
import redis

import fencing
from fencing import Client, StateLost


def test_flushall_under_a_live_handle_is_state_lost(own: tuple[Client, redis.Redis]) -> None:
    client, raw = own
    owner = client.ownership("journal", "host-a", ttl=30)
    owner.claim(["orders/0", "orders/1"])
    raw.flushall()  # a server we started for this test alone
    with pytest.raises(StateLost) as info:
        owner.check("orders/0")
    assert info.value.reason == "missing"
    with pytest.raises(StateLost):
        owner.renew()
    with pytest.raises(StateLost):  # re-claiming does not silently start a new history
        owner.claim("orders/1")
    assert raw.keys("*") == []  # and nothing was written


def test_recreated_row_of_another_incarnation_is_state_lost(
    own: tuple[Client, redis.Redis],
) -> None:
    client, raw = own
    a = client.ownership("journal", "host-a", ttl=30)
    first = a.claim("orders/0")["orders/0"]
    raw.flushall()
    b = client.ownership("journal", "host-b", ttl=30)
    fresh = b.claim("orders/0")["orders/0"]
    assert (fresh.token, fresh.generation) == (1, 1)  # a new handle starts a new history
    assert fresh.incarnation != first.incarnation
    with pytest.raises(StateLost) as info:
        a.renew()
    assert info.value.reason == "incarnation"
    assert b.check("orders/0").token == 1  # the old handle wrote nothing


def test_token_going_backwards_is_state_lost(own: tuple[Client, redis.Redis]) -> None:
    client, raw = own
    key = client.keys.ownership("journal", "orders/0")
    a = client.ownership("journal", "host-a", ttl=30)
    a.claim("orders/0")
    snapshot = raw.dump(key)  # what a replica that missed later writes would have
    assert snapshot is not None
    a.release()
    b = client.ownership("journal", "host-b", ttl=30)
    assert b.claim("orders/0")["orders/0"].token == 2
    raw.restore(key, 0, snapshot, replace=True)  # "failover" to the stale copy
    with pytest.raises(StateLost) as info:
        b.check("orders/0")
    assert info.value.reason == "token"
    c = client.ownership("journal", "host-c", ttl=30)
    with pytest.raises(fencing.OwnershipConflict):  # the stale copy still shows host-a live
        c.claim("orders/0")
