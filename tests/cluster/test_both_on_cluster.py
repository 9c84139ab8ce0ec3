"""The both-flavour behaviour suite (tests/both), run on a Redis Cluster of each kind.

The tests are the very same functions; pytest collects them here with this folder's
fixtures, whose ``server`` is a cluster. The proxy tests skip (the proxy fronts one node).
"""

from __future__ import annotations

from ..both.test_cancellation import *  # noqa: F403
from ..both.test_concurrency import *  # noqa: F403
from ..both.test_faults import *  # noqa: F403
from ..both.test_ownership import *  # noqa: F403
from ..both.test_producers import *  # noqa: F403
from ..both.test_readers import *  # noqa: F403
