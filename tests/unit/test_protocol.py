"""The protocol layer without a server: error replies, script calls, the error mapping, keys."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fencing
from fencing._codes import CODES
from fencing._grant import Grant
from fencing._keys import Keys, decode_resource, encode_resource, slot_of
from fencing._protocol import ScriptCall, parse_error_reply
from fencing._protocol import ownership as own
from fencing._protocol import topic as topic_protocol

KEYS = Keys("ns")
TARGET = own.Target.of(KEYS, "journal", "orders/0")
GRANT = Grant(
    "journal", "orders/0", generation=2, token=5, lease_expires_ms=0, incarnation="inc", new=True
)

# -- parse_error_reply ---------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_parses_into_its_fields(code: str) -> None:
    fields = CODES[code].fields
    values = [f"v{i}" for i in range(len(fields) - 1)] + ["free text  with spaces"]
    reply = parse_error_reply(" ".join([code, *values]))
    assert reply is not None
    assert reply.code == code
    assert reply.fields == dict(zip(fields, values, strict=True))
    assert reply.message == " ".join([code, *values])


@pytest.mark.parametrize("code", sorted(CODES))
def test_missing_fields_are_empty(code: str) -> None:
    reply = parse_error_reply(code)
    assert reply is not None
    assert reply.fields == dict.fromkeys(CODES[code].fields, "")


def test_fields_as_integers() -> None:
    reply = parse_error_reply("CONFLICT 7 2500 host a")
    assert reply is not None
    assert (reply.int("holder_token"), reply.int("remaining_ms")) == (7, 2500)
    assert reply.fields["holder_label"] == "host a"


@pytest.mark.parametrize(
    "message",
    [
        "",
        "ERR something went wrong",
        "NOSCRIPT No matching script",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "conflict 1 2 host",
        "CONFLICTS 1 2 host",
        " CONFLICT 1 2 host",
    ],
)
def test_foreign_errors_are_not_parsed(message: str) -> None:
    assert parse_error_reply(message) is None


# -- ownership script calls ----------------------------------------------------------------


def ownership_calls() -> dict[str, ScriptCall[Any]]:
    return {
        "claim": own.claim(
            KEYS,
            TARGET,
            session="s1",
            label="host-a",
            generation=None,
            ttl_ms=10_000,
            new_incarnation="new-inc",
            seen=None,
        ),
        "renew": own.renew(TARGET, session="s1", grant=GRANT, ttl_ms=10_000),
        "check": own.check(TARGET, session="s1", grant=GRANT),
        "release": own.release(TARGET, session="s1", grant=GRANT),
    }


@pytest.mark.parametrize("name", ["claim", "renew", "check", "release"])
def test_ownership_calls_match_their_script(name: str) -> None:
    call = ownership_calls()[name]
    assert call.script.name == name
    assert len(call.keys) == call.script.nkeys == 1
    assert call.keys == ("ns:{orders/0}:own:journal",)
    assert call.mutating is (name != "check")


def test_ownership_call_arguments() -> None:
    calls = ownership_calls()
    assert calls["claim"].args == (
        "s1",
        "host-a",
        "",
        10_000,
        "new-inc",
        "",
        0,
        "ns:{orders/0}:session:",
    )
    assert calls["renew"].args == ("s1", 5, 10_000, "inc")
    assert calls["check"].args == ("s1", 5, "inc")
    assert calls["release"].args == ("s1", 5, "ns:{orders/0}:own:journal:released")
    seen = own.Seen(incarnation="old", token=3)
    call = own.claim(
        KEYS,
        TARGET,
        session="s1",
        label="host-a",
        generation=0,
        ttl_ms=500,
        new_incarnation="new-inc",
        seen=seen,
    )
    assert call.args == ("s1", "host-a", 0, 500, "new-inc", "old", 3, "ns:{orders/0}:session:")


def test_ownership_replies_parse() -> None:
    calls = ownership_calls()
    grant = calls["claim"].parse([b"granted", 3, 4, 1500, 500, b"inc-1"])
    assert grant == Grant("journal", "orders/0", 3, 4, 1500, "inc-1", new=True)
    kept = calls["claim"].parse(["kept", 3, 4, 1500, 500, "inc-1"])
    assert kept == Grant("journal", "orders/0", 3, 4, 1500, "inc-1", new=False)
    assert calls["renew"].parse([3, 4, 1500, 500]) == own.Lease(3, 4, 1500, 500)
    assert calls["release"].parse(1) is True
    assert calls["release"].parse(0) is False


# -- the error mapping ---------------------------------------------------------------------


def ownership_error(message: str) -> fencing.FencingError:
    reply = parse_error_reply(message)
    assert reply is not None
    return ownership_calls()["claim"].error(reply)


def test_conflict_maps_to_ownership_conflict() -> None:
    error = ownership_error("CONFLICT 7 2500 host a")
    assert type(error) is fencing.OwnershipConflict
    assert (error.group, error.resource) == ("journal", "orders/0")
    assert (error.holder_token, error.remaining, error.holder_label) == (7, 2.5, "host a")


def test_stale_generation_maps_to_stale_generation() -> None:
    error = ownership_error("STALE_GENERATION 5 3")
    assert type(error) is fencing.StaleGeneration
    assert (error.current, error.requested) == (5, 3)
    assert (error.group, error.resource) == ("journal", "orders/0")


def test_fenced_maps_to_fenced() -> None:
    error = ownership_error("FENCED 3 4 host b")
    assert type(error) is fencing.Fenced
    assert (error.token, error.holder_token, error.holder_label) == (3, 4, "host b")
    assert (error.group, error.resource) == ("journal", "orders/0")


def test_lease_expired_maps_to_lease_expired() -> None:
    error = ownership_error("LEASE_EXPIRED 3 1500")
    assert type(error) is fencing.LeaseExpired
    assert (error.token, error.expired_ago) == (3, 1.5)


@pytest.mark.parametrize("reason", ["missing", "incarnation", "token"])
def test_state_lost_maps_to_state_lost(reason: str) -> None:
    error = ownership_error(f"STATE_LOST {reason} a b")
    assert type(error) is fencing.StateLost
    assert (error.reason, error.key) == (reason, "ns:{orders/0}:own:journal")


def test_wrong_type_maps_to_wrong_key_type() -> None:
    error = ownership_error("WRONG_TYPE string ns:{orders/0}:own:journal")
    assert type(error) is fencing.WrongKeyType
    assert (error.key, error.key_type) == ("ns:{orders/0}:own:journal", "string")


@pytest.mark.parametrize(
    "message",
    ["BAD_ARGUMENT ttl_ms 0", "OFFSET_MISMATCH 1 2", "UNKNOWN_TOPIC t", "PARTITIONS_MISMATCH 1 2"],
)
def test_codes_foreign_to_ownership_are_plain_fencing_errors(message: str) -> None:
    error = ownership_error(message)
    assert type(error) is fencing.FencingError
    assert message in str(error)


@pytest.mark.parametrize("name", ["claim", "renew", "check", "release"])
def test_every_ownership_call_maps_fenced(name: str) -> None:
    reply = parse_error_reply("FENCED 3 4 host-b")
    assert reply is not None
    assert type(ownership_calls()[name].error(reply)) is fencing.Fenced


def test_partition_codes_map_to_their_errors() -> None:
    pk = KEYS.partition("orders", 2)
    call = topic_protocol.trim(pk, incarnation="inc", before_offset=0)
    mismatch = call.error(parse_error_reply("OFFSET_MISMATCH 7 9"))  # type: ignore[arg-type]
    assert type(mismatch) is fencing.OffsetMismatch
    assert (mismatch.expected, mismatch.actual) == (7, 9)
    out = call.error(parse_error_reply("OFFSET_OUT_OF_RANGE 1 4 9"))  # type: ignore[arg-type]
    assert type(out) is fencing.OffsetOutOfRange
    assert (out.requested, out.start, out.end) == (1, 4, 9)
    lost = call.error(parse_error_reply("STATE_LOST offset 9 3"))  # type: ignore[arg-type]
    assert type(lost) is fencing.StateLost
    assert (lost.reason, lost.key) == ("offset", pk.meta)


def test_topic_codes_map_to_their_errors() -> None:
    key = KEYS.topic_meta("orders")
    call = topic_protocol.topic_open(
        key, "orders", partitions=None, new_incarnation="new", seen="", pid_expiry_ms=1000
    )
    unknown = call.error(parse_error_reply("UNKNOWN_TOPIC orders"))  # type: ignore[arg-type]
    assert type(unknown) is fencing.UnknownTopic
    assert unknown.topic == "orders"
    mismatch = call.error(parse_error_reply("PARTITIONS_MISMATCH 4 8"))  # type: ignore[arg-type]
    assert type(mismatch) is fencing.InvalidArgument
    assert "4" in str(mismatch)


# -- keys ----------------------------------------------------------------------------------

resources = st.text(min_size=1, max_size=512)


@given(resources)
def test_resources_round_trip(resource: str) -> None:
    assert decode_resource(encode_resource(resource)) == resource


@given(resources)
def test_encoded_resources_are_key_safe(resource: str) -> None:
    encoded = encode_resource(resource)
    assert re.fullmatch(r"[A-Za-z0-9._/%-]+", encoded)
    key = KEYS.ownership("journal", resource)
    assert key == f"ns:{{{encoded}}}:own:journal"
    assert not set("{}:") & set(encoded)


@given(resources, resources)
def test_different_resources_never_share_a_key(a: str, b: str) -> None:
    if a != b:
        assert KEYS.ownership("journal", a) != KEYS.ownership("journal", b)


@pytest.mark.parametrize(
    ("resource", "encoded"),
    [
        ("orders/0", "orders/0"),
        ("a{b}:c", "a%7Bb%7D%3Ac"),
        ("50%", "50%25"),
        ("a b", "a%20b"),
        ("é", "%C3%A9"),
    ],
)
def test_known_encodings(resource: str, encoded: str) -> None:
    assert encode_resource(resource) == encoded
    assert decode_resource(encoded) == resource


def test_slot_of_known_values() -> None:
    assert slot_of("123456789") == 12739  # CRC16/XMODEM check value
    assert slot_of("foo") == 12182
    assert slot_of("{user1000}.following") == slot_of("user1000")


@given(resources)
def test_ownership_key_lives_in_the_slot_of_its_hash_tag(resource: str) -> None:
    key = KEYS.ownership("journal", resource)
    assert slot_of(key) == slot_of(encode_resource(resource))


@given(st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True), st.integers(0, 10_000))
def test_partition_keys_share_the_slot_of_their_ownership_resource(
    topic: str, partition: int
) -> None:
    pk = KEYS.partition(topic, partition)
    slot = slot_of(KEYS.ownership("__producer__", f"{topic}/{partition}"))
    assert slot_of(pk.meta) == slot_of(pk.stream) == slot


@pytest.mark.parametrize("resource", ["orders/0", "a{b}:c d", "é/ü", "%41"])
def test_an_ownership_key_gives_back_its_resource_and_matches_the_group_pattern(
    resource: str,
) -> None:
    keys = Keys("ns")
    key = keys.ownership("journal", resource)
    assert keys.ownership_resource("journal", key) == resource
    assert fnmatch.fnmatchcase(key, keys.ownership_pattern("journal"))
    assert keys.ownership_resource("other", key) is None
    assert Keys("other").ownership_resource("journal", key) is None


def test_keys_that_only_look_like_ownership_rows_are_not_taken_for_them() -> None:
    keys = Keys("ns")
    for key in ("ns:{a}:b}:own:journal", "ns:{}:own:journal", "ns:{x}:own:journal:released"):
        assert keys.ownership_resource("journal", key) is None
