"""Helpers shared by tests, one module per need.

- :mod:`tests.support.polling`: :func:`~tests.support.polling.wait_until`, a poll with a
  deadline (instead of a sleep as synchronisation).
- :mod:`tests.support.logs`: read a topic partition back from Redis in offset order, and
  :func:`~tests.support.logs.check_exactly_once`.
- :mod:`tests.support.fleet`: long-lived worker processes a test starts, commands, signals
  (SIGKILL, SIGSTOP, SIGCONT), respawns, and always cleans up.
"""
