"""The tests written once for both flavours (:mod:`tests.support.flavoured`), run on a
Redis Cluster of each kind.

The tests are the very same functions; pytest collects them here with this folder's
fixtures, whose ``server`` is a cluster. The proxy tests skip (the proxy fronts one node).
"""

from __future__ import annotations

from ..support.flavoured import *  # noqa: F403
