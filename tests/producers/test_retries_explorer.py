"""Retries, lost replies, crashes and resumes explored from seeds (G1, G2, G5, G6).

Each seed drives real producers (fresh, named, resumed from any saved state) through a
fault proxy against a real server, and checks every answer and the log against a model
after every step (:mod:`tests.support.retries_explorer`): every row appended exactly
once (or again only once its message id left a small id window), resends answered with
their original offsets (or refused as older than the window), resends by message id with
no saved state answered as the originals, no gaps, and ``fencing.verify`` at the end.

CI runs seeds from 0 on for :data:`BUDGET` seconds; ``FENCING_SOAK=1`` runs the soak for
``FENCING_EXPLORER_SECONDS`` (1,800 by default) from ``FENCING_EXPLORER_FIRST_SEED``.
A failure names its seed and steps; ``FENCING_EXPLORER_SEED=<seed>`` replays that one.
"""

from __future__ import annotations

import os
import time

import pytest

from ..conftest import ServerInfo
from ..support.retries_explorer import run_seed

#: Seconds of seeds in the default run.
BUDGET = 40.0
REPLAY = os.environ.get("FENCING_EXPLORER_SEED")


def _explore(server: ServerInfo, namespace: str, first: int, seconds: float) -> tuple[int, int]:
    """Run seeds from ``first`` until ``seconds`` passed: (seeds, steps) run."""
    if REPLAY is not None:
        return 1, run_seed(int(REPLAY), server.url, namespace)
    deadline = time.monotonic() + seconds
    seed, steps = first, 0
    while time.monotonic() < deadline:
        steps += run_seed(seed, server.url, namespace)
        seed += 1
    return seed - first, steps


@pytest.mark.one_server
@pytest.mark.timeout(BUDGET + 60)
def test_retries_crashes_and_resumes_write_every_row_once(
    server: ServerInfo, namespace: str
) -> None:
    seeds, steps = _explore(server, namespace, 0, BUDGET)
    print(f"explored {seeds} seeds, {steps} steps")
    assert seeds >= 1


@pytest.mark.soak
@pytest.mark.one_server
@pytest.mark.timeout(0)
def test_retries_crashes_and_resumes_write_every_row_once_for_long(
    server: ServerInfo, namespace: str
) -> None:
    seconds = float(os.environ.get("FENCING_EXPLORER_SECONDS", "1800"))
    first = int(os.environ.get("FENCING_EXPLORER_FIRST_SEED", "100000"))
    seeds, steps = _explore(server, namespace, first, seconds)
    print(f"explored seeds {first}..{first + seeds - 1}: {seeds} seeds, {steps} steps")
