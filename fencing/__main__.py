"""``python -m fencing``: the ``fencing`` command (as ``python -m fencing.cli``).

::

    python -m fencing status orders --url redis://localhost:6379/0
"""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
