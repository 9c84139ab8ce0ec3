"""The asyncio flavour's runtime: tasks, ``redis.asyncio`` (see :mod:`fencing._runtime`)."""
