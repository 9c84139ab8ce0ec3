"""The both-flavour behaviour suite (tests/both) as an ACL-restricted user and over TLS."""

from __future__ import annotations

from ..both.test_cancellation import *  # noqa: F403
from ..both.test_concurrency import *  # noqa: F403
from ..both.test_faults import *  # noqa: F403
from ..both.test_ownership import *  # noqa: F403
from ..both.test_producers import *  # noqa: F403
from ..both.test_readers import *  # noqa: F403
