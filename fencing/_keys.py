"""Every Redis key and channel name the library uses is built here, and nowhere else.

Layout (``ns`` is the client's namespace)::

    <ns>:{<resource>}:own:<group>             hash: one row of the ownership table
    <ns>:{<resource>}:own:<group>:released    channel: the resource was released
    <ns>:{<resource>}:session:<session>       channel: this session's grant on the resource
                                              was severed (one per resource held)
    <ns>:{<name>}:own:__election__:candidates zset: an election's waiting candidates
    <ns>:{<name>}:own:__election__:changed    channel: an election's leader changed
    <ns>:pids                                 counter: producer ids
    <ns>:{<topic>}:topic                      hash: topic metadata (partitions, incarnation,
                                              tk:<name> producer tickets, the delete mark)
    <ns>:{<topic>/<p>}:part                   hash: partition metadata (next offset, start...)
    <ns>:{<topic>/<p>}:log                    stream: the records; entry ID 0-(offset+1)
    <ns>:{<topic>/<p>}:own:__producer__       hash: the exclusive-producer row; token = epoch
    <ns>:{<topic>/<p>}:prod:shared            zset: live shared producers (session -> expiry)
    <ns>:{<topic>/<p>}:prod:waiters           zset: WAIT_FOR_EXCLUSIVE queue (session -> arrival)
    <ns>:{<topic>/<p>}:prod:waitexp           hash: waiter leases (session -> expiry)
    <ns>:{<topic>/<p>}:pids                   hash: idempotence state per PID (pid_state.lua)
    <ns>:{<topic>/<p>}:pidexp                 zset: PID -> last write (ms), for expiry
    <ns>:{<topic>/<p>}:names                  hash: producer name -> "pid generation"
    <ns>:{<topic>/<p>}:win                    hash: duplicate windows, "<pid>:<slot>" -> a batch
    <ns>:{<topic>/<p>}:mids                   hash: message ids -> "<offset> <epoch> <ms>"
    <ns>:{<topic>/<p>}:midq                   list: "<ms> <offset> <id>", oldest first
    <ns>:{<topic>/<p>}:committed              hash: single readers' committed offsets
    <ns>:{<topic>/<p>}:sink:<app>             hash: the Spark sink's dedupe state of one app

docs/reference/keys.md tells each key's fields and the scripts that write it.
All keys about one resource share the hash tag ``{<resource>}``, so every script touches
one slot and runs unchanged on Redis Cluster. A topic partition's tag is
``{<topic>/<partition>}``, which is also the tag of the ownership resource
``"<topic>/<partition>"``: the append script can check the holder atomically.

Channels carry the tag of their resource too, so a script publishes in its own slot:
notifications use sharded pub/sub (SPUBLISH / SSUBSCRIBE) where the server has it, and on a
cluster a message stays on the shard of its resource instead of crossing every node.

Names (namespace, group, topic) match ``[A-Za-z0-9._-]{1,200}``; names starting with ``__``
are reserved for the library. Resource strings are arbitrary text: every character outside
``[A-Za-z0-9._/-]`` is percent-encoded (UTF-8), so braces, colons and spaces can never break
a hash tag or a key, and two different resources never share a key.
"""

from __future__ import annotations

import re
from typing import Final

from redis.crc import key_slot

from .errors import InvalidArgumentType, InvalidName

NAME_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,200}")
RESERVED_PREFIX: Final = "__"
MAX_RESOURCE_LENGTH: Final = 512
MAX_LABEL_LENGTH: Final = 256
_RESOURCE_SAFE: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/-"
)

# Library-owned groups of the ownership table.
PRODUCER_GROUP: Final = "__producer__"
ELECTION_GROUP: Final = "__election__"


def validate_name(kind: str, name: object, *, allow_reserved: bool = False) -> str:
    """Return ``name`` if it is a valid namespace, group or topic name, else raise.

    >>> validate_name("topic", "orders")
    'orders'
    """
    if not isinstance(name, str):
        raise InvalidArgumentType(
            f"{kind} name must be a str, got {type(name).__name__}: pass a name such as 'orders'"
        )
    if not NAME_RE.fullmatch(name):
        raise InvalidName(
            f"invalid {kind} name {name!r}: use 1 to 200 characters from A-Z a-z 0-9 . _ -"
        )
    if name.startswith(RESERVED_PREFIX) and not allow_reserved:
        raise InvalidName(
            f"invalid {kind} name {name!r}: names starting with '__' are reserved for "
            "redis-fencing itself; choose another name"
        )
    return name


def validate_resource(resource: object) -> str:
    """Return ``resource`` if it is a usable ownership resource string, else raise."""
    if not isinstance(resource, str):
        raise InvalidArgumentType(
            f"resource must be a str, got {type(resource).__name__}: pass a name such as 'orders/0'"
        )
    if not resource:
        raise InvalidName("resource must not be empty: pass a name such as 'orders/0'")
    if len(resource) > MAX_RESOURCE_LENGTH:
        raise InvalidName(
            f"resource is {len(resource)} characters long; the limit is {MAX_RESOURCE_LENGTH}: "
            "use a shorter identifier (a hash of a long one, say)"
        )
    if "\x00" in resource:
        raise InvalidName("resource must not contain NUL characters")
    return resource


def validate_label(kind: str, label: object) -> str:
    """Return a human label (owner_id, member_id, candidate_id) if usable, else raise."""
    if not isinstance(label, str):
        raise InvalidArgumentType(
            f"{kind} must be a str, got {type(label).__name__}: pass a label such as 'host-a'"
        )
    if not label or label.isspace():
        raise InvalidName(
            f"{kind} must not be empty: pass a label for people and logs, such as the host name"
        )
    if len(label) > MAX_LABEL_LENGTH:
        raise InvalidName(
            f"{kind} is {len(label)} characters long; the limit is {MAX_LABEL_LENGTH}"
        )
    if any(ch in label for ch in "\x00\r\n"):
        raise InvalidName(f"{kind} must not contain NUL or line breaks: {label!r}")
    return label


def encode_resource(resource: str) -> str:
    """Percent-encode every character outside ``[A-Za-z0-9._/-]`` (as UTF-8 bytes).

    >>> encode_resource("orders/0")
    'orders/0'
    >>> encode_resource("a{b}:c")
    'a%7Bb%7D%3Ac'
    """
    if all(ch in _RESOURCE_SAFE for ch in resource):
        return resource
    out: list[str] = []
    for ch in resource:
        if ch in _RESOURCE_SAFE:
            out.append(ch)
        else:
            out.extend(f"%{byte:02X}" for byte in ch.encode("utf-8"))
    return "".join(out)


def decode_resource(encoded: str) -> str:
    """Invert :func:`encode_resource`."""
    if "%" not in encoded:
        return encoded
    raw = bytearray()
    i = 0
    while i < len(encoded):
        ch = encoded[i]
        if ch == "%":
            raw.append(int(encoded[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(ch.encode("ascii"))
            i += 1
    return raw.decode("utf-8")


class Keys:
    """Builds the keys and channels of one namespace.

    >>> Keys("fencing").ownership("journal", "orders/0")
    'fencing:{orders/0}:own:journal'
    """

    __slots__ = ("_prefix", "namespace")

    def __init__(self, namespace: str) -> None:
        self.namespace = validate_name("namespace", namespace)
        self._prefix = namespace + ":"

    @staticmethod
    def tag(resource: str) -> str:
        """The hash tag of a resource: ``{<encoded resource>}``."""
        return "{" + encode_resource(resource) + "}"

    def ownership(self, group: str, resource: str) -> str:
        """The hash holding the ownership row of (group, resource)."""
        return f"{self._prefix}{self.tag(resource)}:own:{group}"

    def ownership_pattern(self, group: str) -> str:
        """A SCAN MATCH pattern for every ownership row of ``group``.

        >>> Keys("fencing").ownership_pattern("journal")
        'fencing:{*}:own:journal'
        """
        return f"{self._prefix}{{*}}:own:{group}"

    def topic_meta_pattern(self) -> str:
        """A SCAN MATCH pattern for every topic's metadata key (other keys can match it:
        :meth:`topic_of` tells them apart).

        >>> Keys("fencing").topic_meta_pattern()
        'fencing:{*}:topic'
        """
        return f"{self._prefix}{{*}}:topic"

    def topic_of(self, key: str) -> str | None:
        """The topic whose metadata ``key`` is (the inverse of :meth:`topic_meta`), or None
        if it is another key matching :meth:`topic_meta_pattern` (an ownership row of a
        group called 'topic', say).

        >>> Keys("fencing").topic_of("fencing:{orders}:topic")
        'orders'
        """
        head, tail = self._prefix + "{", "}:topic"
        name = key[len(head) : -len(tail)]
        if NAME_RE.fullmatch(name) and self.topic_meta(name) == key:
            return name
        return None

    def ownership_resource(self, group: str, key: str) -> str | None:
        """The resource of an ownership row's key (the inverse of :meth:`ownership`), or
        None if ``key`` is not a row of ``group`` in this namespace.

        >>> Keys("fencing").ownership_resource("journal", "fencing:{a%7Bb%7D}:own:journal")
        'a{b}'
        """
        head, tail = self._prefix + "{", "}:own:" + group
        if not (key.startswith(head) and key.endswith(tail)):
            return None
        encoded = key[len(head) : -len(tail)]
        # Encoded resources hold neither braces nor colons: anything else is another key
        # that happens to match the pattern.
        if not encoded or "}" in encoded or ":" in encoded:
            return None
        return decode_resource(encoded)

    def released_channel(self, group: str, resource: str) -> str:
        """The channel told when (group, resource) is released."""
        return self.ownership(group, resource) + ":released"

    def session_channel_prefix(self, resource: str | None = None) -> str:
        """The prefix of the channels that tell a session its grant on ``resource`` was
        severed; a script appends the session id. It carries the resource's hash tag, so
        the script severing a grant publishes in its own slot.

        >>> Keys("fencing").session_channel_prefix("orders/0")
        'fencing:{orders/0}:session:'

        Without ``resource``: the namespace-wide prefix of earlier versions (no hash tag;
        nothing subscribes to it any more), kept so that older callers still run.
        """
        if resource is None:
            return f"{self._prefix}session:"
        return f"{self._prefix}{self.tag(resource)}:session:"

    def session_channel(self, resource: str, session: str) -> str:
        """The channel told when the grant of ``session`` on ``resource`` is severed."""
        return self.session_channel_prefix(resource) + session

    def election_candidates(self, name: str) -> str:
        """The sorted set of an election's candidates (in the election row's slot)."""
        return self.ownership(ELECTION_GROUP, name) + ":candidates"

    def election_channel(self, name: str) -> str:
        """The channel told when an election's leader changes (elected or resigned)."""
        return self.ownership(ELECTION_GROUP, name) + ":changed"

    def producer_ids(self) -> str:
        """The counter producer ids are drawn from (one per namespace)."""
        return f"{self._prefix}pids"

    def topic_meta(self, topic: str) -> str:
        """The hash holding a topic's metadata."""
        return f"{self._prefix}{self.tag(topic)}:topic"

    def partition(self, topic: str, partition: int) -> PartitionKeys:
        """The keys of one partition of a topic."""
        return PartitionKeys(self, topic, partition)


class PartitionKeys:
    """The keys of one topic partition, built once; all share the tag ``{<topic>/<p>}``."""

    __slots__ = (
        "base",
        "committed",
        "deleted",
        "message_id_queue",
        "message_ids",
        "meta",
        "names",
        "owner",
        "partition",
        "pid_expiry",
        "pids",
        "released",
        "resource",
        "session_prefix",
        "shared",
        "stream",
        "topic",
        "waiters",
        "waiting_leases",
        "window",
    )

    def __init__(self, keys: Keys, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.resource = f"{topic}/{partition}"
        tag = keys.tag(self.resource)
        base = f"{keys.namespace}:{tag}"
        self.base = base
        self.meta = f"{base}:part"
        self.stream = f"{base}:log"
        # The exclusive-producer row is the ownership row ("__producer__", "<topic>/<p>"):
        # its token is the partition's epoch.
        self.owner = keys.ownership(PRODUCER_GROUP, self.resource)
        self.released = keys.released_channel(PRODUCER_GROUP, self.resource)
        # Where producer_open tells a severed exclusive holder (a script appends the session).
        self.session_prefix = keys.session_channel_prefix(self.resource)
        self.shared = f"{base}:prod:shared"
        self.waiters = f"{base}:prod:waiters"
        self.waiting_leases = f"{base}:prod:waitexp"
        self.pids = f"{base}:pids"
        self.pid_expiry = f"{base}:pidexp"
        self.names = f"{base}:names"
        # Idempotent producers' duplicate windows: "<pid>:<slot>" -> one batch each.
        self.window = f"{base}:win"
        # Application message ids (lua/include/message_ids.lua): where each landed, and the
        # order in which they are forgotten.
        self.message_ids = f"{base}:mids"
        self.message_id_queue = f"{base}:midq"
        # Single readers' committed offsets, field <group> (and <group>#t: the committing
        # grant's token); their grants are the rows (<group>, "<topic>/<p>") of this slot.
        self.committed = f"{base}:committed"
        # What a delete leaves behind (lua/partition_delete-14.lua): the deleted partition
        # incarnations and when, so a live handle of one is told of the delete.
        self.deleted = f"{base}:deleted"

    def sink(self, app_id: str) -> str:
        """The Spark sink's dedupe state of one app on this partition (a hash)."""
        return f"{self.base}:sink:{app_id}"


def deletion_mark_of(keys: tuple[str, ...]) -> tuple[str, str] | None:
    """The delete marks of the partition whose metadata is among a call's ``keys``, and
    that partition's resource (``"<topic>/<p>"``); None if no key is a partition's metadata.

    >>> deletion_mark_of(("fencing:{orders/0}:part", "fencing:{orders/0}:log"))
    ('fencing:{orders/0}:deleted', 'orders/0')
    """
    for key in keys:
        head, brace, rest = key.partition(":{")
        encoded, closing, tail = rest.partition("}")
        if brace and closing and tail == ":part" and "/" in encoded:
            return f"{head}:{{{encoded}}}:deleted", decode_resource(encoded)
    return None


def slot_of(key: str) -> int:
    """The Redis Cluster hash slot of a key (honours hash tags)."""
    return int(key_slot(key.encode("utf-8")))
