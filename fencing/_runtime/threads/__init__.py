"""The sync flavour's runtime: threads, blocking sockets (see :mod:`fencing._runtime`)."""
