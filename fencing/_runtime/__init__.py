"""The only code that differs between the sync and the asyncio flavours.

``fencing/_async/`` is written once against this interface; ``fencing/_sync/`` is generated
from it (``tools/unasync.py`` rewrites ``runtime.tasks`` to ``runtime.threads``):

- ``runtime.threads``: threads, ``threading`` locks and events, blocking sockets;
- ``runtime.tasks``: asyncio tasks, locks and events, ``redis.asyncio``.

Each offers the same names: ``Event``, ``Signal`` (one waiter's wake-up), ``io_lock()``
(held across a call to Redis) and ``try_lock``,
``state_lock()`` (guards a few fields, never held across I/O: a no-op under asyncio, where
such a section cannot be interleaved), ``wait_event``, ``base_wait``, ``sleep``, ``spawn``,
``current``, ``call``, ``require_open``, ``Future`` with ``new_future``, ``claim_future``,
``settle`` and ``fail``, ``opening`` (makes a handle factory return an ``Opening``, awaited
or entered with ``async with``; the identity in the sync flavour) and ``Ready`` (a handle made
with no I/O, awaitable as itself under asyncio; an empty class in the sync flavour), and the
modules ``keeper`` (lease renewals in the
background), ``notify`` (one pub/sub listener per client) and ``connections`` (the script
path's connections).
"""
