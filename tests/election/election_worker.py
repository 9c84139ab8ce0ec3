"""One candidate process of ``tests/election/test_processes.py`` (a ``spawn``ed child).

:func:`candidate` runs in its own process with its own :class:`fencing.Client` (on the
server or on a :class:`fencing.faults.Proxy` in front of it) and campaigns in one election
``cfg.campaigns`` times (0: until told to stop). While it leads it either just holds the
term until ``lost`` is set or it is told to resign, or, with ``cfg.act``, acts as a
fencing leader: it opens an ``EXCLUSIVE_WITH_FENCING`` producer on the ``decisions`` topic
and loops - check ``lost``, then append ``term T acts n`` with the term's token in the
``token`` header - until ``lost`` is set.

Told ``hold``, the acting loop stops right after its next check of ``lost`` and before the
send that check allowed, reports ``holding`` and waits for ``go``: the test SIGSTOPs the
process there, so the pause falls exactly between checking ``lost`` and acting (a GC pause
at the worst moment), and the send after it is a real late send.

Events go to the test through the worker's :class:`~tests.support.fleet.Channel` (one pipe
message each, so a SIGKILL never leaves half of one), as dicts with ``ev`` and ``cid``:

- ``ready``; ``elected`` (token, term_started by server time, ``mono``/``wall`` clocks, from
  ``on_elected``) and ``revoked`` (token, reason type and text, clocks, from ``on_revoked``);
- ``not_elected`` (the campaign timed out) and ``campaign_error`` (e.g. Unavailable);
- with ``act``: ``producer`` (token, epoch), ``holding`` (n), ``sent`` (n, value, offset,
  epoch), ``fenced`` (n, value, whether the producer already knew, error) and
  ``send_error`` (n, value, error) for every send;
- ``ended`` (token, why the term ended here, whether ``lost`` was set when the block was
  left) after each campaign block, ``exit`` (callback counts) at the end, and ``error``
  (a traceback) for anything unexpected.

Commands come through the channel too: ``hold``, ``go``, ``resign`` (leave the current term's block)
and ``stop`` (resign, campaign no more, exit).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any

import fencing
from fencing import AccessMode, FencingError, Leadership, OwnershipConflict, ProducerFenced

from ..support.fleet import Channel

TOPIC = "decisions"
#: How long a held loop waits for ``go`` (the test sends it within a few seconds).
GO_TIMEOUT = 30.0
#: The GIL switch interval of a busy leader: longer than its renew deadline.
BUSY_SWITCH_INTERVAL = 1.0


@dataclass(frozen=True)
class Config:
    """What the test tells one candidate (picklable, passed to the spawned process)."""

    url: str
    namespace: str
    cid: str
    election: str
    ttl: float
    renew_deadline: float | None = None
    retry_period: float | None = None
    exit_on_loss: bool = False
    #: Seconds per campaign (None: wait until elected).
    campaign_timeout: float | None = None
    #: Campaigns before exiting (0: until told to stop).
    campaigns: int = 1
    #: Act as the decisions leader while leading (see the module doc).
    act: bool = False
    #: Pause between two iterations of the acting loop (on ``lost``, so never late).
    act_interval: float = 0.02
    #: While leading, do CPU-bound work that holds the GIL (switch interval raised to
    #: :data:`BUSY_SWITCH_INTERVAL`), looking at ``lost.is_set()`` between work units:
    #: the renewer and timer threads starve, and the loop is the first to see the loss.
    busy: bool = False
    #: The process ends itself (SIGALRM) after this long, whatever happens.
    max_seconds: int = 90


def describe(exc: BaseException | None) -> str:
    return "" if exc is None else f"{type(exc).__name__}: {exc}"[:400]


class Candidate:
    def __init__(self, cfg: Config, channel: Channel) -> None:
        self.cfg = cfg
        self.channel = channel
        self.hold = threading.Event()
        self.go = threading.Event()
        self.resign = threading.Event()
        self.stop = threading.Event()
        self.elected_count = 0
        self.revoked_count = 0

    # -- talking to the test -----------------------------------------------------------------

    def out(self, ev: str, **fields: Any) -> None:
        self.channel.report(ev, cid=self.cfg.cid, **fields)

    def listen(self) -> None:
        """Commands from the test; the test going away (EOF) means stop."""
        while True:
            try:
                command = self.channel.command()
            except (EOFError, OSError):
                self.stop.set()
                return
            if command == "hold":
                self.hold.set()
            elif command == "go":
                self.go.set()
            elif command == "resign":
                self.resign.set()
            elif command == "stop":
                self.stop.set()

    # -- callbacks (on_elected in the campaigning thread, on_revoked on the timer thread) -----

    def on_elected(self, term: Leadership) -> None:
        self.elected_count += 1
        self.out(
            "elected",
            token=term.token,
            term_started=term.term_started,
            mono=time.monotonic(),
            wall=time.time(),
        )

    def on_revoked(self, term: Leadership) -> None:
        mono, wall = time.monotonic(), time.time()
        self.revoked_count += 1
        self.out(
            "revoked",
            token=term.token,
            reason=type(term.reason).__name__,
            text=describe(term.reason),
            mono=mono,
            wall=wall,
        )

    # -- the candidate -----------------------------------------------------------------------

    def run(self) -> None:
        cfg = self.cfg
        threading.Thread(target=self.listen, name="commands", daemon=True).start()
        client = fencing.Client.from_url(cfg.url, namespace=cfg.namespace)
        topic = client.topic(TOPIC, partitions=1) if cfg.act else None
        election = client.election(
            cfg.election,
            cfg.cid,
            ttl=cfg.ttl,
            renew_deadline=cfg.renew_deadline,
            retry_period=cfg.retry_period,
            on_elected=self.on_elected,
            on_revoked=self.on_revoked,
            exit_on_loss=cfg.exit_on_loss,
        )
        self.out("ready")
        campaigns = 0
        while not self.stop.is_set() and (cfg.campaigns == 0 or campaigns < cfg.campaigns):
            campaigns += 1
            self.resign.clear()  # before on_elected tells the test it may ask for one
            try:
                with election.campaign(timeout=cfg.campaign_timeout) as term:
                    if topic is not None:
                        self.act(term, topic)
                    elif cfg.busy:
                        self.busy(term)
                    else:
                        while not term.lost.wait(0.01):
                            if self.resign.is_set() or self.stop.is_set():
                                break
                    lost_in_block = term.lost.is_set()
            except OwnershipConflict:
                self.out("not_elected")
                continue
            except FencingError as exc:
                # Unreachable (a black-holed proxy): try again shortly.
                self.out("campaign_error", error=describe(exc))
                self.stop.wait(0.05)
                continue
            self.out(
                "ended",
                token=term.token,
                reason=type(term.reason).__name__,
                text=describe(term.reason),
                lost_in_block=lost_in_block,
            )
        election.close()
        client.close()
        self.out("exit", elected=self.elected_count, revoked=self.revoked_count)

    def busy(self, term: Leadership) -> None:
        old = sys.getswitchinterval()
        sys.setswitchinterval(BUSY_SWITCH_INTERVAL)
        try:
            while not term.lost.is_set():
                sum(range(100))  # a unit of pure-Python work
        finally:
            sys.setswitchinterval(old)

    def act(self, term: Leadership, topic: fencing.Topic) -> None:
        token = term.token
        mode = AccessMode.EXCLUSIVE_WITH_FENCING
        with topic.producer(access_mode=mode, lease_ttl=self.cfg.ttl) as producer:
            self.out("producer", token=token, epoch=producer.epoch(0))
            n = 0
            while not term.lost.is_set():  # the check...
                if self.resign.is_set() or self.stop.is_set():
                    break
                if self.hold.is_set():
                    self.hold.clear()
                    self.out("holding", n=n)
                    if not self.go.wait(GO_TIMEOUT):
                        raise AssertionError(f"no 'go' within {GO_TIMEOUT}s")
                    self.go.clear()
                value = f"term {token} acts {n}"
                known = producer.fenced
                try:  # ...then the act it allowed
                    md = producer.send(value, headers={"token": str(token)}, partition=0)
                except ProducerFenced as exc:
                    self.out("fenced", n=n, value=value, known=known, error=describe(exc))
                except FencingError as exc:
                    self.out("send_error", n=n, value=value, error=describe(exc))
                else:
                    self.out("sent", n=n, value=value, offset=md.offset, epoch=md.epoch)
                n += 1
                term.lost.wait(self.cfg.act_interval)


def candidate(channel: Channel, cfg: Config) -> None:
    """The worker's entry point (run by :class:`tests.support.fleet.Fleet`)."""
    signal.alarm(cfg.max_seconds)  # never outlive a test that lost track of us
    worker = Candidate(cfg, channel)
    try:
        worker.run()
    except BaseException:
        with contextlib.suppress(Exception):
            worker.out("error", text=traceback.format_exc(), config=asdict(cfg))
        raise
