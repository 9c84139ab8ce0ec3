"""Producers, readers and ownership (tests/both) on a cluster reached only over TLS
(``rediss+cluster://``): the script path, the cluster client and the per-node pub/sub
connections all speak TLS."""

from __future__ import annotations

from ...both.test_ownership import *  # noqa: F403
from ...both.test_producers import *  # noqa: F403
from ...both.test_readers import *  # noqa: F403
