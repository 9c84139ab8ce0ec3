"""The tests written once for both flavours (:mod:`tests.support.flavoured`) as an
ACL-restricted user and over TLS."""

from __future__ import annotations

from ..support.flavoured import *  # noqa: F403
