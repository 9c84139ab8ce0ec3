"""The faults of the retries explorer (:mod:`.retries_explorer`): which ones a step draws,
and arming them on the fault proxy by the script calls they hit (never by time).

>>> rules = arm(proxy, pick(rng, SEND_FAULTS), APPEND)            # doctest: +SKIP
"""

from __future__ import annotations

import random

from fencing.faults import Proxy, Rule

__all__ = ["RESOLVE_FAULTS", "SEND_FAULTS", "arm", "pick"]

#: Faults of a send, by the requests they hit (never by time), and their weights.
SEND_FAULTS = {
    "none": 50,
    "reply-lost-once": 10,
    "replies-lost": 14,
    "request-lost-once": 5,
    "requests-lost": 7,
    "reply-delayed": 3,
    "reset": 5,
    "refused-once": 6,
}
RESOLVE_FAULTS = {"none": 2, "reply-lost-once": 1}


def pick(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def arm(proxy: Proxy, fault: str, script: bytes) -> list[Rule]:
    """Arm ``fault`` on calls of ``script``: the rules to remove after the step."""
    if fault == "reply-lost-once":
        return [proxy.drop_replies(script, count=1)]
    if fault == "replies-lost":
        return [proxy.drop_replies(script, count=None)]
    if fault == "request-lost-once":
        return [proxy.drop_requests(script, count=1)]
    if fault == "requests-lost":
        return [proxy.drop_requests(script, count=None)]
    if fault == "reply-delayed":
        return [proxy.drop_replies(script, count=1, close=False)]
    if fault == "reset":
        proxy.sever()
        return []
    if fault == "refused-once":
        rule = proxy.refuse_connections(count=1)
        proxy.sever()
        return [rule]
    assert fault == "none", fault
    return []
