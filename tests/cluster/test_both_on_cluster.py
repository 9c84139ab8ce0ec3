"""The tests written once for both flavours (:mod:`tests.support.flavoured`), run on a
Redis Cluster of each kind.

The tests are the very same functions; pytest collects them here with this folder's
fixtures, whose ``server`` is a cluster. The proxy tests skip (the proxy fronts one node).
"""

from __future__ import annotations

import pytest

from ..support.flavoured import *  # noqa: F403

#: Also on Redis 8: CLUSTER replies and sharded pub/sub.
pytestmark = pytest.mark.server_specific
