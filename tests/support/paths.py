"""Where things are: the repository root, for subprocesses run from it (``python -m
tests...``, ``python examples/...``) and for the files a test reads."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROOT"]

#: The repository root (the folder holding ``tests/`` and ``fencing/``).
ROOT = Path(__file__).resolve().parents[2]
