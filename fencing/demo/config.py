"""The demo's knobs and names: its topics, its workers, and how long each step runs."""

from __future__ import annotations

from dataclasses import dataclass

from fencing._lua_loader import script

TOPIC_A = "A"
TOPIC_B = "B"
WORKERS = ("w1", "w2", "w3")
#: The append script as it appears on the wire: its SHA1 follows EVALSHA. Only appends are
#: hit by the proxy's faults; lease renewals on the same connections pass untouched.
APPEND_SHA = script("append").sha1.encode()


@dataclass(frozen=True)
class Config:
    """The knobs of one run. :data:`DEFAULT` takes ~20 s, :data:`QUICK` ~8 s."""

    #: Lease of the exclusive producers (s): a dead or paused holder is replaced after it.
    lease_ttl: float = 1.0
    partitions: int = 2
    #: Pause between two sends of a worker (s).
    interval: float = 0.02
    #: How long each holder appends before the next fault (s), and at least how many records.
    hold: float = 5.0
    min_records: int = 20
    #: The paused holder stays stopped this many leases.
    pause_leases: float = 2.5
    #: Sends a fenced worker still tries, to show none of them lands.
    after_fence: int = 3
    #: The idempotent producer on topic B: its lease, pause between sends, and the chance
    #: that the proxy loses the reply of a given append.
    idem_lease: float = 2.0
    idem_interval: float = 0.05
    drop_chance: float = 0.06
    #: Bound on each step of the scenario (a worker starting, a takeover...).
    step_timeout: float = 20.0


DEFAULT = Config()
QUICK = Config(lease_ttl=0.75, hold=1.2, min_records=10, idem_interval=0.04, drop_chance=0.12)
