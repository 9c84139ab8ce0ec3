"""The source of truth for the user-facing objects, written once as asyncio code.

Everything here is built on :mod:`fencing._protocol` (no I/O: script calls and replies) and
:mod:`fencing._runtime.tasks` (asyncio tasks, locks, pub/sub). ``tools/unasync.py`` turns
each module into its sync twin in ``fencing/_sync/`` (``await`` dropped, ``runtime.tasks``
becomes ``runtime.threads``); CI fails when those are stale. Users import the asyncio
flavour from :mod:`fencing.aio`, the sync one from :mod:`fencing`.
"""
