"""The tests written once for both flavours (:mod:`tests.support.flavoured`) as an
ACL-restricted user and over TLS."""

from __future__ import annotations

import pytest

from ..support.flavoured import *  # noqa: F403

#: Also on Redis 8: its ACL categories and its TLS build.
pytestmark = pytest.mark.server_specific
