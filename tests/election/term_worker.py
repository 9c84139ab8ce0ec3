"""The processes of ``tests/election/test_term_processes.py`` (``spawn``ed children): a
leader that writes through ``leadership.producer`` every 50 ms until told to stop, and a
successor that campaigns, does start-up work, then writes.

Each record's value is ``"<role> <n> <wall clock>"`` (``time.time()``, one clock for every
process on this host), so the log read back says when each record was sent; its
``timestamp_ms`` says when the server appended it.

Events (dicts with ``ev``): ``leading`` (token), ``sent`` (n, offset, epoch), ``refused``
(n, error type) for each send refused, ``elected`` (token, ``wall`` and the server's
``server_ms`` right after ``campaign()`` returned), ``done``; ``error`` for anything
unexpected. The leader stops on the command ``stop``.
"""

from __future__ import annotations

import time
import traceback

import redis

import fencing

from ..support.fleet import Channel

TOPIC = "decisions"
ELECTION = "writer"
TTL = 2.0
#: The leader's pace, and the successor's start-up work between campaign() and its writes.
SEND_EVERY = 0.05
STARTUP_WORK = 3.0


def leader(channel: Channel, url: str, namespace: str) -> None:
    """Lead, then send every SEND_EVERY seconds until told to stop, reporting each send;
    refusals (the term ended) are reported and the sends go on, as a careless loop would."""
    try:
        client = fencing.Client.from_url(url, namespace=namespace)
        election = client.election(ELECTION, candidate_id="old", ttl=TTL)
        term = election.campaign(timeout=30)
        channel.report("leading", token=term.token)
        producer = term.producer(client.topic(TOPIC, partitions=1))
        n = 0
        while channel.command(timeout=SEND_EVERY) != "stop":
            n += 1
            try:
                md = producer.send(f"old {n} {time.time():.6f}", partition=0)
            except fencing.FencingError as exc:
                channel.report("refused", n=n, error=type(exc).__name__)
            else:
                channel.report("sent", n=n, offset=md.offset, epoch=md.epoch)
        channel.report("done")
    except Exception:
        channel.report("error", text=traceback.format_exc())


def successor(channel: Channel, url: str, namespace: str) -> None:
    """Campaign; once elected, report when (wall clock and server time), do STARTUP_WORK
    seconds of start-up work, then write three records."""
    try:
        client = fencing.Client.from_url(url, namespace=namespace)
        election = client.election(ELECTION, candidate_id="new", ttl=TTL)
        channel.report("ready")
        term = election.campaign(timeout=60)
        wall = time.time()
        seconds, micros = redis.Redis.from_url(url).time()
        server_ms = seconds * 1000 + micros // 1000
        channel.report("elected", token=term.token, wall=wall, server_ms=server_ms)
        time.sleep(STARTUP_WORK)  # the start-up work of the scenario, not a synchronisation
        with term.producer(client.topic(TOPIC, partitions=1)) as producer:
            for n in range(3):
                md = producer.send(f"new {n} {time.time():.6f}", partition=0)
                channel.report("sent", n=n, offset=md.offset, epoch=md.epoch)
        term.resign()
        channel.report("done")
    except Exception:
        channel.report("error", text=traceback.format_exc())
