"""The scripts of term-bound producers when a request or its reply is lost on the wire:
registering a topic with the election (``term_guard``, also its drop of a deleted topic),
making the election the topic's guard (``topic_guard``), opening a term's producer
(``producer_open`` in mode 'term') and fencing a guarded partition at a new term's grant
(``term_fence``). The library resends the same call; the outcome is exactly the one without
the fault: the same epochs, the same log, the same guarded set.
"""

from __future__ import annotations

import contextlib

import pytest
import redis

import fencing
from fencing._keys import ELECTION_GROUP
from fencing._lua_loader import script
from fencing.faults import Proxy, Rule

from ..support.wire import evalsha

SCRIPTS = ("term_guard", "topic_guard", "producer_open", "term_fence")

#: (script, when its call is lost): while the first term guards its topics and writes, or
#: during the second term's campaign (fencing; ``term_guard`` then drops a deleted topic).
LOST_CALLS = [
    ("term_guard", "first term"),
    ("topic_guard", "first term"),
    ("producer_open", "first term"),
    ("term_fence", "second campaign"),
    ("topic_guard", "second campaign"),
    ("term_guard", "second campaign"),
]


@pytest.mark.parametrize("lose", ["drop_replies", "drop_requests"])
@pytest.mark.parametrize(("name", "when"), LOST_CALLS)
def test_a_lost_call_of_a_term_script_is_resent_with_the_same_outcome(
    proxied: tuple[Proxy, fencing.Client],
    client: fencing.Client,
    raw: redis.Redis,
    name: str,
    when: str,
    lose: str,
) -> None:
    proxy, pclient = proxied
    for each in SCRIPTS:  # loaded: the call lost is an applied one, not a NOSCRIPT reply
        raw.script_load(script(each).source)
    rules: list[Rule] = []

    def losing(phase: str) -> contextlib.AbstractContextManager[object]:
        if phase != when:
            return contextlib.nullcontext()
        rules.append(getattr(proxy, lose)(evalsha(name)))
        return rules[-1]

    first = pclient.election("sched", "one", ttl=10.0)
    with losing("first term"), first.campaign() as term:
        with term.producer(pclient.topic("decisions", partitions=2)) as producer:
            assert producer.send(b"a", partition=1).offset == 0
            assert [producer.epoch(0), producer.epoch(1)] == [1, 1]
        with term.producer(pclient.topic("gone", partitions=1)):
            pass
    client.delete_topic("gone")
    second = pclient.election("sched", "two", ttl=10.0)
    with losing("second campaign"):
        term2 = second.campaign(timeout=10)
    assert term2.token == 2
    guards = client.keys.ownership(ELECTION_GROUP, "sched") + ":guards"
    assert raw.hkeys(guards) == [b"decisions"]
    for p in (0, 1):
        row = raw.hmget(client.keys.partition("decisions", p).owner, "token", "session", "guard")
        assert row == [b"2", b"", b"sched"]
    with term2.producer(pclient.topic("decisions")) as producer2:
        assert producer2.send(b"b", partition=1).offset == 1
    term2.resign()
    with pytest.raises(fencing.ProducerBusy, match="guarded by election 'sched'"):
        client.topic("decisions").producer()
    records = client.topic("decisions").reader(1, "earliest").read(max_records=10)
    assert [(r.value, r.epoch) for r in records] == [(b"a", 1), (b"b", 2)]
    assert [rule.hits for rule in rules] == [1]
    first.close()
    second.close()
