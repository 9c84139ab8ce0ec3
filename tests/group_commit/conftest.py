"""The group-commit tests' fixtures (from :mod:`tests.support.group_commit`)."""

from __future__ import annotations

from ..support.group_commit import interrupts_in_finalizers, no_recheck, restore_sigint

__all__ = ["interrupts_in_finalizers", "no_recheck", "restore_sigint"]
