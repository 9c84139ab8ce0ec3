"""A small threaded TCP proxy that loses requests or replies on demand (fault injection).

Used by the fault tests and by ``fencing demo`` (to show that an idempotent producer's
retries after lost replies never duplicate). The proxy listens on ``127.0.0.1:<free port>``
only, and forwards every accepted connection to one upstream server over plain TCP (TLS and
unix sockets are not supported). Callers arm **rules** on it; a rule looks at the bytes the
client sends and, when a client->server chunk contains its pattern, does one of:

- ``drop_replies``: forward the request to the server, then swallow what the server answers
  on that connection: the request is applied but its reply is lost. With ``close=True``
  (the default) the proxy closes the connection as soon as the reply arrives, so the client
  sees a connection error at once; with ``close=False`` the connection stays open and mute,
  so the client sees its socket timeout.
- ``drop_requests``: never deliver the request (nor anything after it on that connection):
  the server never sees it. With ``close=True`` the connection is closed at once; with
  ``close=False`` it stays open and deaf until the client gives up on it.
- ``observe``: count (and keep a copy of) matching requests, change nothing.
- ``refuse_connections``: close newly accepted connections at once (no pattern): the
  client's connect fails before any request of it was sent.

A rule fires ``count`` times (``None``: on every match until removed), counts its ``hits``
and sets its ``fired`` event on the first one, so callers wait on events, never on sleeps.
Rules are context managers that remove themselves on exit ("restore the proxy").

Matching is per chunk as received from the socket: a pattern split across two chunks is
still found (a short tail of the previous chunk is kept), but several matching requests in
one chunk (pipelining) count as one hit. Redis clients put a command's name and its first
arguments in one write, so a pattern such as ``b"EVALSHA\\r\\n$40\\r\\n" + sha`` is found in
the chunk that starts the request.

Bounded: at most :data:`MAX_CONNECTIONS` connections at a time (more are refused by closing
them), chunks of :data:`CHUNK` bytes, socket operations time out after
:data:`IO_TIMEOUT` seconds, and :meth:`Proxy.close` joins every thread with a timeout.

>>> with Proxy(upstream_port) as proxy:                                   # doctest: +SKIP
...     client = fencing.Client.from_url(proxy.url_for("redis://127.0.0.1:6379/0"))
...     with proxy.drop_replies(b"EVALSHA") as rule:
...         ...  # the next EVALSHA is applied, its reply never arrives
...     assert rule.hits == 1
"""

from __future__ import annotations

import contextlib
import enum
import selectors
import socket
import threading
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

from .errors import InvalidArgument, InvalidArgumentType

#: Bytes read from a socket at a time.
CHUNK = 65536
#: Connections the proxy holds at once; more are closed as soon as accepted.
MAX_CONNECTIONS = 64
#: How often idle threads look at the stop flag (seconds).
POLL_INTERVAL = 0.05
#: Bound on connecting upstream and on every send (seconds).
IO_TIMEOUT = 5.0
#: Bound on joining a thread at shutdown (seconds).
JOIN_TIMEOUT = 5.0
#: Longest pattern a rule may have (the tail of the previous chunk kept for matching).
MAX_PATTERN = 256
#: Matching chunks an observing rule keeps (see :attr:`Rule.captured`).
MAX_CAPTURES = 32

LOOPBACK = "127.0.0.1"


class Action(enum.Enum):
    """What a rule does to a request that matches it.

    >>> proxy.drop_replies(b"EVALSHA").action                      # doctest: +SKIP
    <Action.DROP_REPLY: 'drop_reply'>
    """

    DROP_REPLY = "drop_reply"
    DROP_REQUEST = "drop_request"
    OBSERVE = "observe"
    REFUSE_CONNECTION = "refuse_connection"


class Rule:
    """An armed fault (or an observer) on a :class:`Proxy`. Made by the proxy's methods.

    >>> with proxy.drop_replies(b"EVALSHA") as rule:               # doctest: +SKIP
    ...     send_in_background()
    ...     rule.wait(5)                      # the request went, its reply was lost
    """

    def __init__(
        self, proxy: Proxy, pattern: bytes, action: Action, count: int | None, close: bool
    ) -> None:
        if not isinstance(pattern, bytes) or not 0 < len(pattern) <= MAX_PATTERN:
            raise InvalidArgument(f"pattern must be 1..{MAX_PATTERN} bytes, got {pattern!r}")
        if count is not None and count < 1:
            raise InvalidArgument(f"count must be None or >= 1, got {count}")
        self.proxy = proxy
        self.pattern = pattern
        self.action = action
        self.close = close
        #: Hits left before the rule stops firing (None: unlimited).
        self.remaining = count
        #: How many times the rule fired.
        self.hits = 0
        #: Set when the rule fires the first time.
        self.fired = threading.Event()
        #: For ``observe`` rules: the first :data:`MAX_CAPTURES` matching chunks, each with
        #: the tail of the chunk before it (so a request split in two is still whole).
        self.captured: list[bytes] = []

    def _take(self) -> bool:
        """Fire once if any hits are left. Called under the proxy's lock."""
        if self.remaining is not None:
            if self.remaining == 0:
                return False
            self.remaining -= 1
        self.hits += 1
        self.fired.set()
        return True

    def wait(self, timeout: float) -> None:
        """Wait until the rule fired once; ``TimeoutError`` after ``timeout`` seconds.

        >>> rule = proxy.observe(b"EVALSHA")                            # doctest: +SKIP
        >>> rule.wait(5)                          # TimeoutError if nothing matched in 5 s
        """
        if not self.fired.wait(timeout):
            raise TimeoutError(
                f"{self!r} did not fire within {timeout}s: no request matched its pattern"
            )

    def remove(self) -> None:
        """Disarm the rule (connections it already muted or deafened stay so).

        >>> rule = proxy.drop_requests(b"EVALSHA", count=None)          # doctest: +SKIP
        >>> rule.remove()                         # (leaving its ``with`` block does it too)
        """
        self.proxy._remove(self)

    def __enter__(self) -> Rule:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()

    def __repr__(self) -> str:
        return (
            f"<Rule {self.action.value} {self.pattern[:32]!r} close={self.close} "
            f"hits={self.hits} remaining={self.remaining}>"
        )


class _Connection:
    """One proxied connection: the client's socket, the upstream one, and fault flags."""

    __slots__ = ("client", "close_on_reply", "deaf", "mute", "tail", "upstream")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.tail = b""  # the end of the last client->server chunk, for split patterns
        self.mute = False  # swallow everything the server sends from now on
        self.deaf = False  # swallow everything the client sends from now on
        self.close_on_reply = False  # close once the server answers a muted request

    def shutdown(self) -> None:
        """Wake the connection's thread (safe from any thread); it closes the sockets."""
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.close()


class _Close(Exception):
    """Raised inside a connection's thread to close that connection."""


class Proxy:
    """A TCP proxy on loopback in front of ``upstream_host:upstream_port`` (see the module doc).

    Start it with ``with Proxy(port) as proxy:`` (or :meth:`start` / :meth:`close`); clients
    connect to ``proxy.port`` (:meth:`url_for` rewrites a server URL to go through it).
    The proxy itself only ever listens on 127.0.0.1, whatever the upstream.

    >>> with Proxy(6379) as proxy:                                  # doctest: +SKIP
    ...     client = fencing.Client.from_url(proxy.url)
    """

    def __init__(self, upstream_port: int, upstream_host: str = LOOPBACK) -> None:
        if isinstance(upstream_port, bool) or not isinstance(upstream_port, int):
            raise InvalidArgumentType(f"upstream_port must be an int, got {upstream_port!r}")
        if not 0 < upstream_port < 65536 or not upstream_host:
            raise InvalidArgument(f"no server to forward to at {upstream_host!r}:{upstream_port}")
        self.upstream = (upstream_host, upstream_port)
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._connections: dict[_Connection, threading.Thread] = {}
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        #: Connections accepted so far (refused ones included).
        self.accepted = 0
        #: Server->client bytes swallowed so far.
        self.dropped_reply_bytes = 0
        #: Client->server bytes swallowed so far.
        self.dropped_request_bytes = 0
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Proxy:
        """Listen on a free loopback port and start accepting connections.

        >>> proxy = Proxy(server.port).start()                          # doctest: +SKIP
        >>> proxy.close()
        """
        if self._listener is not None:
            raise RuntimeError("the proxy is already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, 0))
        listener.listen(MAX_CONNECTIONS)
        listener.settimeout(POLL_INTERVAL)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"proxy-accept-{self.port}", daemon=True
        )
        self._acceptor.start()
        return self

    def close(self) -> None:
        """Stop accepting, close every connection and join every thread. Idempotent.

        >>> proxy = Proxy(server.port).start()                          # doctest: +SKIP
        >>> proxy.close()                         # (leaving its ``with`` block does it too)
        """
        self._stopping.set()
        if self._acceptor is not None:
            self._acceptor.join(JOIN_TIMEOUT)
        if self._listener is not None:
            self._listener.close()
        threads = self.sever()
        for thread in threads:
            thread.join(JOIN_TIMEOUT)
        with self._lock:
            self._rules.clear()

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``: where a Redis client should connect.

        >>> Proxy(6379).start().url                                     # doctest: +SKIP
        'redis://127.0.0.1:40111/0'
        """
        return f"redis://{LOOPBACK}:{self.port}/0"

    def url_for(self, server_url: str) -> str:
        """``server_url`` (``redis://[user:password@]host:port/db?...``) through the proxy:
        the same credentials, database and options, with the proxy's address.

        >>> proxy.url_for("redis://:secret@10.0.0.5:6379/2")             # doctest: +SKIP
        'redis://:secret@127.0.0.1:40111/2'
        """
        parts = urlsplit(server_url)
        if parts.scheme != "redis":
            raise InvalidArgument(  # the scheme only: the URL may hold a password
                f"the proxy forwards plain TCP only (redis://), not {parts.scheme}://"
            )
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@" if credentials else ""
        netloc += f"{LOOPBACK}:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path or "/0", parts.query, ""))

    # -- rules ----------------------------------------------------------------------------

    def drop_replies(self, pattern: bytes, count: int | None = 1, *, close: bool = True) -> Rule:
        """Deliver the next ``count`` matching requests but lose the server's replies.

        >>> with proxy.drop_replies(b"EVALSHA") as rule:                # doctest: +SKIP
        ...     producer.send(b"v")               # applied; its reply lost, then resent
        >>> rule.hits
        1
        """
        return self._add(Rule(self, pattern, Action.DROP_REPLY, count, close))

    def drop_requests(self, pattern: bytes, count: int | None = 1, *, close: bool = True) -> Rule:
        """Never deliver the next ``count`` matching requests.

        >>> with proxy.drop_requests(b"EVALSHA", close=False):          # doctest: +SKIP
        ...     owner.renew()                     # never reaches the server
        """
        return self._add(Rule(self, pattern, Action.DROP_REQUEST, count, close))

    def refuse_connections(self, count: int | None = 1) -> Rule:
        """Close the next ``count`` accepted connections at once, before anything reaches
        the server: the client's connect (its handshake) fails, and no request was sent.

        >>> with proxy.refuse_connections(count=None):                  # doctest: +SKIP
        ...     proxy.sever()                     # every reconnect fails until the block ends
        """
        return self._add(Rule(self, b"<connect>", Action.REFUSE_CONNECTION, count, True))

    def observe(self, pattern: bytes) -> Rule:
        """Count the requests that match ``pattern``; change nothing.

        >>> with proxy.observe(b"EVALSHA") as seen:                     # doctest: +SKIP
        ...     producer.send(b"v")
        >>> seen.hits
        1
        """
        return self._add(Rule(self, pattern, Action.OBSERVE, None, False))

    def clear(self) -> None:
        """Disarm every rule.

        >>> proxy.clear()                                               # doctest: +SKIP
        """
        with self._lock:
            self._rules.clear()

    def sever(self) -> list[threading.Thread]:
        """Close every open connection (clients reconnect); returns their threads.

        >>> for thread in proxy.sever():                                # doctest: +SKIP
        ...     thread.join(5)
        """
        with self._lock:
            items = list(self._connections.items())
        for connection, _ in items:
            connection.shutdown()
        return [thread for _, thread in items]

    def active_connections(self) -> int:
        """Connections open now.

        >>> proxy.active_connections()                                  # doctest: +SKIP
        2
        """
        with self._lock:
            return len(self._connections)

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def _remove(self, rule: Rule) -> None:
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)

    # -- threads --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._admit(client)

    def _admit(self, client: socket.socket) -> None:
        with self._lock:
            full = len(self._connections) >= MAX_CONNECTIONS
            refused = any(
                rule._take() for rule in self._rules if rule.action is Action.REFUSE_CONNECTION
            )
        if full or refused or self._stopping.is_set():
            client.close()
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=IO_TIMEOUT)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            sock.settimeout(IO_TIMEOUT)  # bounds sendall; recv only runs once readable
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = _Connection(client, upstream)
        thread = threading.Thread(
            target=self._pump, args=(connection,), name=f"proxy-conn-{self.port}", daemon=True
        )
        with self._lock:
            self._connections[connection] = thread
        thread.start()

    def _pump(self, connection: _Connection) -> None:
        selector = selectors.DefaultSelector()
        selector.register(connection.client, selectors.EVENT_READ, True)
        selector.register(connection.upstream, selectors.EVENT_READ, False)
        try:
            while not self._stopping.is_set():
                for key, _ in selector.select(POLL_INTERVAL):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    data = sock.recv(CHUNK)
                    if not data:
                        return  # one side closed: close both
                    if key.data:
                        self._from_client(connection, data)
                    else:
                        self._from_server(connection, data)
        except (_Close, OSError):
            return
        finally:
            selector.close()
            connection.close()
            with self._lock:
                self._connections.pop(connection, None)

    def _from_client(self, connection: _Connection, data: bytes) -> None:
        window = connection.tail + data
        keep = len(connection.tail)
        connection.tail = window[-(MAX_PATTERN - 1) :]
        if connection.deaf:
            self._count_dropped(request=len(data))
            return
        fired: Rule | None = None
        with self._lock:
            for rule in self._rules:
                if rule.action is Action.REFUSE_CONNECTION:
                    continue
                # Only matches that end in the new data: the tail alone matched before.
                if window.find(rule.pattern, max(0, keep - len(rule.pattern) + 1)) < 0:
                    continue
                if rule.action is Action.OBSERVE:
                    rule._take()
                    if len(rule.captured) < MAX_CAPTURES:
                        rule.captured.append(window)
                elif fired is None and rule._take():
                    fired = rule
        if fired is not None and fired.action is Action.DROP_REQUEST:
            self._count_dropped(request=len(data))
            if fired.close:
                raise _Close
            connection.deaf = True
            return
        connection.upstream.sendall(data)
        if fired is not None:  # DROP_REPLY: the request is on its way, its reply is not
            connection.mute = True
            connection.close_on_reply = fired.close

    def _count_dropped(self, *, request: int = 0, reply: int = 0) -> None:
        with self._lock:
            self.dropped_request_bytes += request
            self.dropped_reply_bytes += reply

    def _from_server(self, connection: _Connection, data: bytes) -> None:
        if connection.mute:
            self._count_dropped(reply=len(data))
            if connection.close_on_reply:
                raise _Close
            return
        connection.client.sendall(data)
