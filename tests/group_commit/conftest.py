"""The group-commit tests' fixtures (from :mod:`tests.support.group_commit`)."""

from __future__ import annotations

from ..support.group_commit import no_recheck, restore_sigint

__all__ = ["no_recheck", "restore_sigint"]
