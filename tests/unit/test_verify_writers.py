"""fencing.verify's G1 along one partition's log, without a server: one writer per epoch,
judged from the (epoch, producer id) each record carries.

A writer whose state expired while idle takes a fresh PID within its epoch (KIP-360): the
PID changes and never comes back, which is still one writer. A PID that comes back after
another one in the same epoch is two writers interleaving."""

from __future__ import annotations

from fencing.verify._log_checks import LogChecks
from fencing.verify._model import Violation


def _checked(entries: list[tuple[int, int]], token: int = 9) -> list[Violation]:
    """The violations of an exclusive partition whose log is ``entries`` as (epoch, pid)."""
    violations: list[Violation] = []
    checks = LogChecks(exclusive=True, violations=violations)
    meta = {b"start": b"0", b"next": str(len(entries)).encode()}
    checks.begin(0, meta, "hash", str(token).encode())
    for offset, (epoch, pid) in enumerate(entries):
        fields = {b"e": str(epoch).encode(), b"p": str(pid).encode(), b"v": b"x"}
        checks.entry(f"0-{offset + 1}".encode(), fields)
    checks.end()
    return violations


def test_a_writer_taking_fresh_pids_within_its_epoch_is_one_writer() -> None:
    assert _checked([(1, 7), (1, 7), (1, 8), (1, 9), (2, 10), (2, 11)]) == []


def test_a_pid_coming_back_within_its_epoch_is_two_writers_interleaving() -> None:
    violations = _checked([(1, 7), (1, 8), (1, 7), (1, 7)])
    assert [(v.guarantee, v.offset) for v in violations] == [("G1", 2)]
    assert "producer 7 writes in epoch 1 again after producer 8" in violations[0].message


def test_an_epoch_going_back_is_still_caught_whatever_the_pids() -> None:
    violations = _checked([(1, 7), (2, 8), (1, 9)])
    assert [(v.guarantee, v.offset) for v in violations] == [("G1", 2), ("G2", 2)]


def test_a_record_above_the_current_epoch_is_still_caught() -> None:
    violations = _checked([(1, 7), (1, 8), (4, 8)], token=3)
    assert [(v.guarantee, v.offset) for v in violations] == [("G1", 2)]
    assert "above the partition's current epoch 3" in violations[0].message
