"""Producers, readers, consumers, ownership and elections written once for both flavours, on a
cluster reached only over TLS (``rediss+cluster://``): the script path, the cluster client
and the per-node pub/sub connections all speak TLS."""

from __future__ import annotations

from ...consumers.test_both_flavours import *  # noqa: F403
from ...election.test_both_flavours import *  # noqa: F403
from ...ownership.test_both_flavours import *  # noqa: F403
from ...producers.test_both_flavours import *  # noqa: F403
