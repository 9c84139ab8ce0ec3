"""Helpers shared by tests, one module per need.

- :mod:`~tests.support.polling`: :func:`wait_until` (and its coroutine twin), a poll with a
  deadline instead of a sleep as synchronisation.
- :mod:`~tests.support.clock`: the server's clock, by which leases are judged.
- :mod:`~tests.support.logs`: read a topic partition back in offset order, fill one, check
  it holds a list exactly once, and verify it with :func:`fencing.verify.verify_log`.
- :mod:`~tests.support.keys`: a namespace's keys, to show that a refused call wrote nothing.
- :mod:`~tests.support.wire`: the scripts as the fault proxy sees them on the wire.
- :mod:`~tests.support.pubsub`: a raw subscription's next message; a notification inbox.
- :mod:`~tests.support.threads`: a call run in a thread of its own.
- :mod:`~tests.support.processes`: forked children; :mod:`~tests.support.fleet`: long-lived
  worker processes a test starts, commands, signals (SIGKILL, SIGSTOP, SIGCONT), respawns,
  and always cleans up.
- :mod:`~tests.support.flavours`: one test for both flavours (sync handles driven as the
  asyncio API shows them); :mod:`~tests.support.flavoured`: those tests, gathered for the
  folders that run them on a cluster, as an ACL user and over TLS.
- :mod:`~tests.support.group_commit`: callers queued on a partition, and what each was told.
- :mod:`~tests.support.fresh_pid`: an idle producer's expired state, made at once.
- :mod:`~tests.support.spark`: a local PySpark session; :mod:`~tests.support.cli`: the
  ``fencing`` command run in-process; :mod:`~tests.support.paths`: the repository root.
"""
