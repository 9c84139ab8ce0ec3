"""A candidate of :mod:`tests.election.test_chaos`: campaigns, writes while leading, resigns.

Run by :class:`tests.support.fleet.Fleet` (``candidate(channel, cfg)``) in a process of its
own, until the test sends ``"stop"``. It loops: campaign; once elected, write with the term's
token until ``lost`` is set or until a moment drawn at random (then it leaves the block,
which resigns); campaign again. The test SIGSTOPs, SIGCONTs and SIGKILLs it meanwhile.

Each write is two token-checked writes, each its own atomic step:

- SQLite (the classic guard users write against a database):
  ``UPDATE lease SET token=? WHERE id=1 AND token <= ?`` and, only if that changed the row,
  ``INSERT INTO writes(token, writer, seq)``, in one ``BEGIN IMMEDIATE`` transaction (the
  file lock serialises writers, the rowid of ``writes`` is the commit order);
- Redis: a Lua check-and-set on a key of the test's own (``HSET`` the token if it is not
  below the stored one, and ``RPUSH`` ``"token writer seq"`` to a list).

A little simulated work sits between the check of ``lost`` and the writes, so that a SIGSTOP
often lands between them and a resumed process makes the late write the token must refuse.

Events (one pipe message each, through the fleet channel; ``mono`` is ``time.monotonic()``,
one clock for every process on the host, ``wall`` is ``time.time()``):

- ``ready``;
- ``elected`` (token, term_started by server time, mono, wall), first thing in
  ``on_elected``; ``revoked`` (token, reason type and text, mono, wall), first thing in
  ``on_revoked``;
- ``wrote`` / ``refused`` (token, seq, store ``"sql"`` or ``"redis"``): the guard let the
  write through / refused it (a newer token had written);
- ``ended`` (token, reason, whether the block was left on ``lost``);
- ``exit`` (how many times each callback ran) once it stopped cleanly.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

import fencing
from fencing import Leadership

from ..support.fleet import Channel

#: Check-and-set of a token-ordered value: KEYS[1] the fence hash, KEYS[2] the log list;
#: ARGV token, writer, seq. 1 if written, 0 if a newer token had written already.
CAS_LUA = """
local current = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if current > token then
    return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
return 1
"""

#: SQLite's busy timeout: longer than any pause the test injects (a process stopped inside
#: its transaction holds the file lock until it is resumed or killed).
BUSY_TIMEOUT = 30.0


def create_database(path: Path) -> None:
    """The fenced table and the append-only record of writes (called by the test)."""
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    try:
        db.execute("CREATE TABLE lease (id INTEGER PRIMARY KEY, token INTEGER NOT NULL)")
        db.execute(
            "CREATE TABLE writes (n INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL,"
            " writer TEXT NOT NULL, seq INTEGER NOT NULL)"
        )
        db.execute("INSERT INTO lease (id, token) VALUES (1, 0)")
    finally:
        db.close()


def fence_keys(namespace: str) -> tuple[str, str]:
    """The Redis keys of the check-and-set (one hash tag: one slot)."""
    return f"{namespace}:{{chaos-fence}}:token", f"{namespace}:{{chaos-fence}}:log"


@dataclass(frozen=True)
class Config:
    """What the test tells a candidate (picklable)."""

    url: str
    namespace: str
    election: str
    db_path: str
    ttl: float
    #: Seeds this candidate's own RNG (with its id and life).
    seed: int
    #: A term is left after a time drawn in [0, hold_max] seconds (unless lost first).
    hold_max: float
    #: Simulated work between the check of ``lost`` and a write, drawn in [0, work_max].
    work_max: float = 0.01
    #: on_elected does start-up work (waiting on ``lost``) this often, for up to ttl / 2.
    slow_start_odds: float = 0.3


class Candidate:
    def __init__(self, channel: Channel, cfg: Config) -> None:
        self.channel = channel
        self.cfg = cfg
        self.writer = f"{channel.wid}.{channel.life}"
        self.rng = random.Random(f"{cfg.seed}/{self.writer}")
        self.stop = threading.Event()
        self.elected: list[int] = []
        self.revoked: list[int] = []
        self.seq = 0
        self.election: fencing.Election | None = None

    # -- callbacks ---------------------------------------------------------------------------

    def on_elected(self, term: Leadership) -> None:
        self.channel.report(
            "elected",
            token=term.token,
            term_started=term.term_started,
            mono=time.monotonic(),
            wall=time.time(),
        )
        self.elected.append(term.token)
        if self.rng.random() < self.cfg.slow_start_odds:
            # Start-up work that honours `lost` as its cancellation signal.
            term.lost.wait(self.rng.uniform(0, self.cfg.ttl / 2))

    def on_revoked(self, term: Leadership) -> None:
        mono, wall = time.monotonic(), time.time()
        reason = term.reason
        self.channel.report(
            "revoked",
            token=term.token,
            reason=type(reason).__name__,
            text=str(reason)[:300],
            mono=mono,
            wall=wall,
        )
        self.revoked.append(term.token)

    # -- commands ----------------------------------------------------------------------------

    def listen(self) -> None:
        while True:
            try:
                command = self.channel.command()
            except (EOFError, OSError):
                command = "stop"
            if command == "stop":
                self.stop.set()
                if self.election is not None:
                    self.election.close()  # ends a waiting campaign, resigns a term
                return

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        cfg = self.cfg
        client = fencing.Client.from_url(cfg.url, namespace=cfg.namespace)
        r = redis.Redis.from_url(cfg.url, socket_timeout=10)
        cas = r.register_script(CAS_LUA)
        keys = list(fence_keys(cfg.namespace))
        db = sqlite3.connect(cfg.db_path, timeout=BUSY_TIMEOUT, isolation_level=None)
        self.election = client.election(
            cfg.election,
            candidate_id=self.channel.wid,
            ttl=cfg.ttl,
            on_elected=self.on_elected,
            on_revoked=self.on_revoked,
        )
        threading.Thread(target=self.listen, name="commands", daemon=True).start()
        self.channel.report("ready", mono=time.monotonic())
        try:
            while not self.stop.is_set():
                try:
                    with self.election.campaign() as term:
                        left_on_lost = self.lead(term, db, cas, keys)
                except fencing.InvalidArgument:
                    if self.stop.is_set():
                        break  # closed by the stop command while campaigning
                    raise
                self.channel.report(
                    "ended",
                    token=term.token,
                    reason=type(term.reason).__name__,
                    left_on_lost=left_on_lost,
                )
        finally:
            self.election.close()
            client.close()
            r.close()
            db.close()
        self.channel.report("exit", elected=self.elected, revoked=self.revoked)

    def lead(self, term: Leadership, db: sqlite3.Connection, cas: Any, keys: list[str]) -> bool:
        """Write with the term's token until lost (True) or until the drawn moment to
        resign, or a stop (False)."""
        token = term.token
        leave_at = time.monotonic() + self.rng.uniform(0, self.cfg.hold_max)
        while True:
            if term.lost.is_set():  # the check...
                return True
            if self.stop.is_set() or time.monotonic() >= leave_at:
                return False
            time.sleep(self.rng.uniform(0, self.cfg.work_max))  # work the check allowed
            self.seq += 1
            seq = self.seq
            # ...then the writes it allowed, each refused by its store if a newer token wrote.
            db.execute("BEGIN IMMEDIATE")
            try:
                changed = db.execute(
                    "UPDATE lease SET token = ? WHERE id = 1 AND token <= ?", (token, token)
                ).rowcount
                if changed:
                    db.execute(
                        "INSERT INTO writes (token, writer, seq) VALUES (?, ?, ?)",
                        (token, self.writer, seq),
                    )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            self.channel.report(
                "wrote" if changed else "refused", store="sql", token=token, seq=seq
            )
            done = cas(keys=keys, args=[token, self.writer, seq])
            self.channel.report("wrote" if done else "refused", store="redis", token=token, seq=seq)


def candidate(channel: Channel, cfg: Config) -> None:
    """The fleet's entry point."""
    Candidate(channel, cfg).run()
