"""What a command of the ``fencing`` CLI is: a handler, and how each command module adds
itself to the parser (``register(add)``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

#: What runs a command: its parsed arguments to an exit status.
Handler = Callable[[argparse.Namespace], int]
#: ``add(name, help, epilog, handler)``: a subcommand with the common options.
AddCommand = Callable[[str, str, str, Handler], argparse.ArgumentParser]
