"""Every ```` ```python ```` block of README.md and docs/ runs, against real servers.

The blocks of one page run in order in one shared namespace: a page reads as one script, and
each block is one item (``README.md::block3``). A block whose earlier sibling failed is
skipped naming it; a block run alone (``-k``) first runs the blocks before it. Addresses are
written as users write them and replaced here: ``redis://localhost:6379/0`` (or without the
``/0``) by the throwaway server, ``redis+cluster://localhost:7000`` by a local cluster,
``rediss://localhost:6380/0?ssl_ca_certs=<file>`` by a server over TLS (and its CA). Each
page has a ``FENCING_NAMESPACE`` of its own (and ``FENCING_REDIS_URL`` names the throwaway
server, so a default address never reaches a real one); its keys are dropped after its last
block. A block titled with a pytest file name (``title="test_orders.py"``) is written to a
temporary folder and run by pytest in a subprocess; every test in it must pass; a block titled
``conftest.py`` is written beside the page's pytest files after it. A block after
``<!-- example: skip — reason -->`` is skipped with that reason. Pages that use PySpark get
the suite's Spark session.
"""

from __future__ import annotations

import linecache
import re
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from ..conftest import ServerInfo, _drop_namespace
from ..support.user_pytest import run_user_pytest
from .examples import Block, all_blocks

BLOCKS = all_blocks()
BY_PAGE: dict[str, list[Block]] = {}
for _block in BLOCKS:
    BY_PAGE.setdefault(_block.page, []).append(_block)

#: The addresses users write (a user and password may come before the host).
SERVER_URL = re.compile(r"redis://(?P<auth>[^\s@/'\"]+@)?localhost:6379(?:/0)?(?![\w/:.])")
CLUSTER_URL = re.compile(r"redis\+cluster://(?P<auth>[^\s@/'\"]+@)?localhost:7000(?![\w/:.])")
#: A server over TLS, with the certificate authority the user names (replaced by the one the
#: throwaway server's certificate was made with).
TLS_URL = re.compile(
    r"rediss://(?P<auth>[^\s@/'\"]+@)?localhost:6380(?:/0)?\?ssl_ca_certs=[^\s'\"&]+(?![\w/:.&])"
)
#: What is left of a real server's address after the substitutions: never run it.
REAL_ADDRESS = re.compile(
    r"(?:localhost|127\.0\.0\.1)(?::|['\"]?\s*,\s*port\s*=\s*)(?:6379|6380|7000)\b"
    r"|port\s*=\s*6379\b"
)
#: A page that starts Spark or a cluster, or runs a pytest file.
SLOW_PAGE_TIMEOUT = 600


def _uses_spark(blocks: list[Block]) -> bool:
    return any(
        "pyspark" in b.code or "fencing.spark" in b.code for b in blocks if b.test_file is None
    )


def _uses_cluster(blocks: list[Block]) -> bool:
    return any(CLUSTER_URL.search(b.code) for b in blocks)


def _uses_tls(blocks: list[Block]) -> bool:
    return any(TLS_URL.search(b.code) for b in blocks)


def _params() -> list[Any]:
    params = []
    for block in BLOCKS:
        page = BY_PAGE[block.page]
        slow = block.test_file is not None or any(
            uses(page) for uses in (_uses_spark, _uses_cluster, _uses_tls)
        )
        marks = [pytest.mark.timeout(SLOW_PAGE_TIMEOUT)] if slow else []
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


@dataclass
class PageRun:
    """One page's script as it runs: its globals, its namespace, how far it got."""

    namespace: str = field(default_factory=lambda: "d" + uuid.uuid4().hex[:12])
    globals: dict[str, Any] = field(default_factory=lambda: {"__name__": "__main__"})
    done: int = 0  # the blocks run so far (1-based index of the last one)
    failed: str | None = None  # the id of the block that failed
    cluster: ServerInfo | None = None  # the cluster, once a block named one
    tls: ServerInfo | None = None  # the server over TLS, once a block named one
    conftest: str | None = None  # the page's conftest.py so far, for its pytest files


RUNS: dict[str, PageRun] = {}


@dataclass(frozen=True)
class Targets:
    """Where the page's addresses point."""

    server: ServerInfo
    cluster: ServerInfo | None
    tls: ServerInfo | None = None

    def substitute(self, text: str) -> str:
        text = SERVER_URL.sub(lambda m: _at(self.server.url, m.group("auth")), text)
        if self.cluster is not None:
            cluster = self.cluster.url
            text = CLUSTER_URL.sub(lambda m: _at(cluster, m.group("auth")), text)
        if self.tls is not None:
            tls = self.tls.url
            text = TLS_URL.sub(lambda m: _at(tls, m.group("auth")), text)
        return text


def _at(url: str, auth: str | None) -> str:
    """``url`` with the example's ``user:password@``, if it wrote one."""
    if not auth:
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=auth + parts.netloc.rsplit("@", 1)[-1]))


def _targets(request: pytest.FixtureRequest, run: PageRun, block: Block) -> Targets:
    """Where the page's blocks up to this one point: Spark and the cluster start at the
    first block about to run that needs them (never for a page that already failed)."""
    so_far = BY_PAGE[block.page][: block.index]
    if run.cluster is None and _uses_cluster(so_far):
        run.cluster = request.getfixturevalue("docs_cluster")
    if run.tls is None and _uses_tls(so_far):
        run.tls = request.getfixturevalue("docs_tls_server")
    if _uses_spark(so_far):
        request.getfixturevalue("spark")
    return Targets(request.getfixturevalue("docs_server"), run.cluster, run.tls)


def _source(block: Block, targets: Targets) -> str:
    text = targets.substitute(block.code)
    left = REAL_ADDRESS.search(text)
    if left:
        pytest.fail(
            f"{block.id} (line {block.line}) names {left.group(0)!r} in a form the runner does "
            "not replace: write redis://localhost:6379/0 or redis+cluster://localhost:7000",
            pytrace=False,
        )
    return text


def _exec(block: Block, text: str, run: PageRun) -> None:
    filename = f"{block.page}::block{block.index}"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    shown = None
    try:
        exec(compile(text, filename, "exec"), run.globals)
    except Exception as exc:
        # From the example's frame on, one line per frame (pytest would print pages of
        # source around every frame of the library).
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        shown = "".join(traceback.format_exception(type(exc), exc, tb))
    if shown is not None:
        pytest.fail(f"{block.id} (the block at line {block.line}) raised:\n{shown}", pytrace=False)


def _run_test_file(block: Block, text: str, run: PageRun, targets: Targets, tmp: Path) -> None:
    assert block.test_file is not None
    (tmp / block.test_file).write_text(text, encoding="utf-8")
    if run.conftest is not None:
        (tmp / "conftest.py").write_text(run.conftest, encoding="utf-8")
    env = {"FENCING_NAMESPACE": run.namespace, "FENCING_REDIS_URL": targets.server.url}
    result = run_user_pytest(tmp, "-q", block.test_file, env=env)
    if result.returncode != 0:
        pytest.fail(
            f"{block.id} (line {block.line}): pytest {block.test_file} exited "
            f"{result.returncode}\n{result.stdout}\n{result.stderr}",
            pytrace=False,
        )


def _run(block: Block, run: PageRun, request: pytest.FixtureRequest, tmp: Path) -> None:
    """Run one block; a failure marks the page as failed at this block."""
    try:
        targets = _targets(request, run, block)
        text = _source(block, targets)
        if block.conftest:
            run.conftest = text
        elif block.test_file is not None:
            _run_test_file(block, text, run, targets, tmp)
        else:
            _exec(block, text, run)
    except BaseException:
        run.failed = block.id
        raise


def _finish(page: str, run: PageRun, server: ServerInfo) -> None:
    """After a page's last block: forget its script and drop its keys."""
    run.globals.clear()
    _drop_namespace(server.url, run.namespace)
    if run.cluster is not None:
        cluster = redis.RedisCluster.from_url(run.cluster.url.replace("+cluster", ""))
        try:
            for key in cluster.scan_iter(match=f"{run.namespace}:*", count=1000):
                cluster.delete(key)
        finally:
            cluster.close()
    RUNS.pop(page, None)


@pytest.mark.parametrize("block", _params())
def test_example(
    block: Block, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    page = BY_PAGE[block.page]
    run = RUNS.setdefault(block.page, PageRun())
    server: ServerInfo = request.getfixturevalue("docs_server")
    monkeypatch.setenv("FENCING_NAMESPACE", run.namespace)
    monkeypatch.setenv("FENCING_REDIS_URL", server.url)
    try:
        # Run alone (-k), a block first runs the ones before it: a page is one script.
        for earlier in page[run.done : block.index - 1]:
            if run.failed is None and earlier.skip is None:
                _run(earlier, run, request, tmp_path)
            run.done = earlier.index
        if run.failed is not None:
            pytest.skip(f"{run.failed} failed, and this page's blocks run as one script")
        run.done = block.index
        if block.skip is not None:
            pytest.skip(f"{block.id}: {block.skip}")
        _run(block, run, request, tmp_path)
    finally:
        if block.index == page[-1].index:
            _finish(block.page, run, server)
