# GENERATED from fencing/_async/__init__.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""The source of truth for the user-facing objects, written once as asyncio code.

Everything here is built on :mod:`fencing._protocol` (no I/O: script calls and replies) and
:mod:`fencing._runtime.threads` (asyncio tasks, locks, pub/sub). ``tools/unasync.py`` turns
each module into its sync twin in ``fencing/_sync/`` (``await`` dropped, ``runtime.tasks``
becomes ``runtime.threads``); CI fails when those are stale. Users import the asyncio
flavour from :mod:`fencing`, the sync one from :mod:`fencing`.
"""
