"""``python -m fencing.cli``: the ``fencing`` command.

::

    python -m fencing.cli status orders --url redis://localhost:6379/0
"""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
