"""Bad input to the ownership API: a typed error before any write, Redis left unchanged.

Also the other side of the coin: arbitrary resource strings (braces, colons, spaces, percent
signs, unicode) are accepted and each gets a key of its own with exactly one hash tag
(the key rules).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import redis

import fencing
from fencing import Client, Ownership

from ..support.keys import snapshot

GROUP = "jobs"
HELD = "orders/0"

@pytest.fixture
def owner(client: Client) -> Ownership:
    """A handle holding one grant, so there is state that a bad call could damage."""
    handle = client.ownership(GROUP, owner_id="host-a", ttl=30.0)
    assert handle.claim([HELD])[HELD].token == 1
    return handle


Case = tuple[str, Callable[[Client, Ownership], object], type[Exception], str]

CASES: list[Case] = [
    # group
    ("group empty", lambda c, o: c.ownership("", "host-a"), fencing.InvalidName, "use 1 to 200"),
    (
        "group int",
        lambda c, o: c.ownership(5, "host-a"),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass a name",
    ),
    (
        "group None",
        lambda c, o: c.ownership(None, "host-a"),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass a name",
    ),
    ("group space", lambda c, o: c.ownership("a b", "host-a"), fencing.InvalidName, "A-Z a-z"),
    ("group colon", lambda c, o: c.ownership("a:b", "host-a"), fencing.InvalidName, "A-Z a-z"),
    ("group brace", lambda c, o: c.ownership("a{b}", "host-a"), fencing.InvalidName, "A-Z a-z"),
    ("group unicode", lambda c, o: c.ownership("jöbs", "host-a"), fencing.InvalidName, "A-Z a-z"),
    (
        "group too long",
        lambda c, o: c.ownership("g" * 201, "host-a"),
        fencing.InvalidName,
        "1 to 200",
    ),
    (
        "group reserved",
        lambda c, o: c.ownership("__producer__", "host-a"),
        fencing.InvalidName,
        "choose another name",
    ),
    (
        "group reserved prefix",
        lambda c, o: c.ownership("__mine", "host-a"),
        fencing.InvalidName,
        "choose another name",
    ),
    # owner_id
    ("owner_id empty", lambda c, o: c.ownership(GROUP, ""), fencing.InvalidName, "pass a label"),
    (
        "owner_id int",
        lambda c, o: c.ownership(GROUP, 7),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass a label",
    ),
    (
        "owner_id bytes",
        lambda c, o: c.ownership(GROUP, b"host-a"),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass a label",
    ),
    (
        "owner_id whitespace",
        lambda c, o: c.ownership(GROUP, " \t "),
        fencing.InvalidName,
        "pass a label",
    ),
    # ttl
    ("ttl zero", lambda c, o: c.ownership(GROUP, "h", ttl=0), fencing.InvalidArgument, "positive"),
    (
        "ttl negative",
        lambda c, o: c.ownership(GROUP, "h", ttl=-1.0),
        fencing.InvalidArgument,
        "positive",
    ),
    (
        "ttl nan",
        lambda c, o: c.ownership(GROUP, "h", ttl=math.nan),
        fencing.InvalidArgument,
        "positive",
    ),
    (
        "ttl inf",
        lambda c, o: c.ownership(GROUP, "h", ttl=math.inf),
        fencing.InvalidArgument,
        "positive",
    ),
    (
        "ttl str",
        lambda c, o: c.ownership(GROUP, "h", ttl="10"),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass e.g. 10.0",
    ),
    (
        "ttl bool",
        lambda c, o: c.ownership(GROUP, "h", ttl=True),
        fencing.InvalidArgumentType,
        "pass e.g. 10.0",
    ),
    # resources
    ("resource empty", lambda c, o: o.claim(""), fencing.InvalidName, "pass a name"),
    ("resource empty in list", lambda c, o: o.claim([""]), fencing.InvalidName, "pass a name"),
    (
        "resource int",
        lambda c, o: o.claim(5),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass e.g.",
    ),
    (
        "resource bytes",
        lambda c, o: o.claim(b"orders/1"),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass e.g.",
    ),
    (
        "resource None",
        lambda c, o: o.claim(None),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass e.g.",
    ),
    (
        "list with an int",
        lambda c, o: o.claim(["orders/1", 5]),  # type: ignore[list-item]
        fencing.InvalidArgumentType,
        "pass a name",
    ),
    (
        "list with bytes",
        lambda c, o: o.claim(["orders/1", b"orders/2"]),  # type: ignore[list-item]
        fencing.InvalidArgumentType,
        "pass a name",
    ),
    (
        "list with the held one and a bad one",
        lambda c, o: o.claim([HELD, None]),  # type: ignore[list-item]
        fencing.InvalidArgumentType,
        "pass a name",
    ),
    (
        "resources empty",
        lambda c, o: o.claim([]),
        fencing.InvalidArgument,
        "name at least one resource",
    ),
    (
        "resource too long",
        lambda c, o: o.claim("r" * 513),
        fencing.InvalidName,
        "use a shorter identifier",
    ),
    # generation
    (
        "generation negative",
        lambda c, o: o.claim("orders/1", generation=-1),
        fencing.InvalidArgument,
        "0 resets",
    ),
    (
        "generation float",
        lambda c, o: o.claim("orders/1", generation=1.0),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "None or an int >= 0",
    ),
    (
        "generation str",
        lambda c, o: o.claim("orders/1", generation="1"),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "None or an int >= 0",
    ),
    (
        "generation bool",
        lambda c, o: o.claim(HELD, generation=False),
        fencing.InvalidArgumentType,
        "None or an int >= 0",
    ),
    # timeout
    (
        "timeout negative",
        lambda c, o: o.claim("orders/1", wait=True, timeout=-1),
        fencing.InvalidArgument,
        "None or >= 0",
    ),
    (
        "timeout nan",
        lambda c, o: o.claim("orders/1", wait=True, timeout=math.nan),
        fencing.InvalidArgument,
        "None or >= 0",
    ),
    (
        "timeout str",
        lambda c, o: o.claim("orders/1", wait=True, timeout="1"),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "None or seconds",
    ),
    # the other calls of a handle
    (
        "check bytes",
        lambda c, o: o.check(b"orders/0"),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
        "pass a name",
    ),
    ("check empty", lambda c, o: o.check(""), fencing.InvalidName, "pass a name"),
    (
        "check not held",
        lambda c, o: o.check("orders/1"),
        fencing.InvalidArgument,
        "claim it first",
    ),
    (
        "renew with a bad resource",
        lambda c, o: o.renew([HELD, 3]),  # type: ignore[list-item]
        fencing.InvalidArgumentType,
        "pass a name",
    ),
    (
        "release empty list",
        lambda c, o: o.release([]),
        fencing.InvalidArgument,
        "name at least one resource",
    ),
    (
        "release with a bad resource",
        lambda c, o: o.release([HELD, b"x"]),  # type: ignore[list-item]
        fencing.InvalidArgumentType,
        "pass a name",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "hint"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_refused_before_any_write(
    client: Client,
    owner: Ownership,
    raw: redis.Redis,
    namespace: str,
    call: Callable[[Client, Ownership], object],
    error: type[Exception],
    hint: str,
) -> None:
    before = snapshot(raw, namespace)
    assert before  # the held grant's row is there to be damaged
    with pytest.raises(error) as info:
        call(client, owner)
    assert type(info.value) is error
    if issubclass(error, fencing.InvalidArgumentType):
        assert isinstance(info.value, TypeError)
    else:
        assert isinstance(info.value, ValueError)
        assert not isinstance(info.value, TypeError)
    assert hint in str(info.value)
    assert snapshot(raw, namespace) == before
    # The handle is unharmed: it still holds its grant, by server time.
    assert owner.check(HELD).token == 1
    assert snapshot(raw, namespace) == before


# The constructor never touches Redis, so no server is needed to refuse a namespace.
NO_SERVER = "redis://127.0.0.1:1/0"

NAMESPACE_CASES: list[tuple[object, type[Exception]]] = [
    ("", fencing.InvalidName),
    ("bad ns", fencing.InvalidName),
    ("a:b", fencing.InvalidName),
    ("{tag}", fencing.InvalidName),
    ("n" * 201, fencing.InvalidName),
    ("__reserved", fencing.InvalidName),
    (5, fencing.InvalidArgumentType),
]


@pytest.mark.parametrize(
    ("namespace_arg", "error"),
    NAMESPACE_CASES,
    ids=["empty", "space", "colon", "braces", "too long", "reserved", "int"],
)
def test_invalid_namespace_is_a_typed_error(namespace_arg: object, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        fencing.Client.from_url(NO_SERVER, namespace=namespace_arg)  # type: ignore[arg-type]
    assert type(info.value) is error
    if error is fencing.InvalidName:
        assert "A-Z a-z 0-9" in str(info.value) or "choose another name" in str(info.value)


def test_invalid_namespace_is_refused_on_every_route(monkeypatch: pytest.MonkeyPatch) -> None:
    for namespace_arg, error in NAMESPACE_CASES:
        with pytest.raises(error, match="namespace"):
            fencing.Client(redis.Redis(), namespace=namespace_arg)  # type: ignore[arg-type]
        if isinstance(namespace_arg, str):
            monkeypatch.setenv("FENCING_NAMESPACE", namespace_arg)
            with pytest.raises(error, match="namespace"):
                fencing.Client.from_url(NO_SERVER)


def test_wrong_key_type_is_refused_without_writing(
    client: Client, owner: Ownership, raw: redis.Redis, namespace: str
) -> None:
    key = client.keys.ownership(GROUP, "orders/9")
    raw.set(key, "not a hash")
    before = snapshot(raw, namespace)
    with pytest.raises(fencing.WrongKeyType) as info:
        owner.claim(["orders/9"])
    assert (info.value.key, info.value.key_type) == (key, "string")
    assert "choose another namespace or remove that key" in str(info.value)
    assert snapshot(raw, namespace) == before
    assert raw.get(key) == b"not a hash"
    assert owner.grants.keys() == {HELD}


AWKWARD = ["a{b}", "a}b{", "x:y", "50%", "50%25", "ü ñ", "a"]


def test_awkward_resource_strings_get_a_key_each(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    owner = client.ownership(GROUP, owner_id="host-a", ttl=30.0)
    grants = owner.claim(AWKWARD)
    assert sorted(grants) == sorted(AWKWARD)
    for resource, grant in grants.items():
        assert (grant.resource, grant.group, grant.generation, grant.token, grant.new) == (
            resource,
            GROUP,
            1,
            1,
            True,
        )
        assert owner.check(resource).token == 1

    keys = {resource: client.keys.ownership(GROUP, resource) for resource in AWKWARD}
    assert len(set(keys.values())) == len(AWKWARD)  # no two resources share a key
    for key in keys.values():
        assert key.count("{") == 1
        assert key.count("}") == 1
        assert key.startswith(f"{namespace}:{{")
        assert key.endswith(f"}}:own:{GROUP}")
    # One row per resource and nothing else: exactly these keys exist in the namespace.
    assert set(snapshot(raw, namespace)) == {k.encode() for k in keys.values()}
    session = owner.session.encode()
    for key in keys.values():
        row = raw.hgetall(key)
        assert (row[b"session"], row[b"label"], row[b"gen"], row[b"token"]) == (
            session,
            b"host-a",
            b"1",
            b"1",
        )
    assert owner.release() == dict.fromkeys(AWKWARD, True)
    owner.close()


def test_a_braced_resource_never_touches_its_prefix(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    holder = client.ownership(GROUP, owner_id="holder-of-a", ttl=30.0)
    assert holder.claim("a")["a"].token == 1
    row_of_a = client.keys.ownership(GROUP, "a")
    before = raw.dump(row_of_a)

    other = client.ownership(GROUP, owner_id="other", ttl=30.0)
    for resource in ("a{b}", "a}b{", "{a}", "a{"):
        # Granted although "a" is held: a different resource.
        assert other.claim(resource)[resource].token == 1
        # generation=0 severs any holder of *that* resource, never the holder of "a".
        assert other.claim(resource, generation=0)[resource].token == 1
        assert other.release(resource) == {resource: True}
    assert raw.dump(row_of_a) == before
    assert holder.check("a").token == 1
    assert not holder.severed.is_set()
    assert len(snapshot(raw, namespace)) == 5
    holder.close()
    other.close()
