"""Binding handles to the process that opened them.

A handle's identity is its session. If a forked child or an unpickled copy could use it,
two processes would act as one holder and the single-writer guarantee would be gone, so
both are refused.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

from .errors import ProcessBoundError

#: Bumped in every child os.fork() makes (before it returns there): a handle bound at the
#: same count is in the process that opened it, without a getpid() system call per send.
#: (A fork that bypasses os.fork, say libc's through ctypes, runs no hooks: the child's
#: handles then still look like its parent's. Nothing in Python forks that way.)
_forks = 0


def _forked() -> None:
    global _forks  # noqa: PLW0603 - one counter, read on every send: a plain global
    _forks += 1


os.register_at_fork(after_in_child=_forked)


class ProcessBound:
    """Mixin: remembers the opening process; refuses pickling and use after fork."""

    _pid: int
    _forks_seen: int

    def _bind_process(self) -> None:
        self._pid = os.getpid()
        self._forks_seen = _forks

    def _in_own_process(self) -> bool:
        """False in a forked child: the handle's session, leases and locks are the parent's,
        and the child must do nothing with them (not even release them)."""
        return _forks == self._forks_seen

    def _check_process(self) -> None:
        if _forks != self._forks_seen:
            raise ProcessBoundError(
                f"this {type(self).__name__} was opened in process {self._pid} and cannot be "
                f"used from process {os.getpid()} (after fork): its session would be shared. "
                "Open a new handle in this process"
            )

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise ProcessBoundError(
            f"a {type(self).__name__} cannot be pickled or copied: its session identifies one "
            "holder in one process. Pass the parameters instead and open a handle where needed"
        )
