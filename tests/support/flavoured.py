"""The tests written once for both flavours that the folders running them elsewhere gather:
every area's ``test_both_flavours.py`` (ownership, elections, producers, readers and
consumers, faults), the flavoured concurrency tests, the first cancellation tests and topic
administration. A
module in ``cluster/`` or ``secure/`` star-imports this one, and pytest collects the very
same tests again with that folder's fixtures (its ``server`` is a cluster, a server behind
an ACL, one reached over TLS).
"""

from __future__ import annotations

from ..consumers.test_both_flavours import *  # noqa: F403
from ..election.test_both_flavours import *  # noqa: F403
from ..faults.test_both_flavours import *  # noqa: F403
from ..faults.test_cancellation import (  # noqa: F401
    test_cancelled_free_claims_are_given_back_unless_they_returned,
    test_cancelled_sends_land_once_or_never_and_the_log_holds,
    test_cancelled_waiting_opens_and_claims_leave_nothing_held,
)
from ..ownership.test_both_flavours import *  # noqa: F403
from ..producers.test_both_flavours import *  # noqa: F403
from ..producers.test_concurrency import *  # noqa: F403
from ..topics.test_delete import *  # noqa: F403
