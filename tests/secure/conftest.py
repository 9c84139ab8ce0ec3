"""The both-flavour behaviour suite as a least-privilege ACL user, and over TLS.

``acl``: the suite's server kinds, with a user whose rights are exactly
:func:`fencing.acl.acl_rule` (keys and channels opened to the suite's namespaces ``t*``
instead of one namespace). ``tls``: a server that speaks only TLS with a certificate made
for the test (Valkey from the wheel is built without TLS: that case is skipped, saying so).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fencing.acl import acl_rule
from fencing.embedded import EmbeddedServer, TlsFiles

from ..conftest import KINDS, ServerInfo
from ..support.acl import unknown_commands

MODES = [f"{kind}-acl" for kind in KINDS] + [f"{kind}-tls" for kind in KINDS]


@pytest.fixture(scope="session", params=MODES)
def server(request: pytest.FixtureRequest) -> Iterator[ServerInfo]:
    kind, mode = request.param.split("-")
    if mode == "acl":
        with EmbeddedServer.start(kind) as made:
            admin = redis.Redis(port=made.port)
            without = unknown_commands(admin)
            rule = [
                part.replace("~ns:*", "~t*").replace("&ns:*", "&t*")
                for part in acl_rule("ns", password="fencing-pw", without=without)
            ]
            admin.execute_command("ACL", "SETUSER", "fencing", *rule)
            admin.close()
            url = f"redis://fencing:fencing-pw@127.0.0.1:{made.port}/0"
            yield ServerInfo(url=url, kind=request.param, owned=True, embedded=made)
        return
    tls = TlsFiles.make(Path(tempfile.mkdtemp(prefix="fencing-tls-")))
    try:
        made = EmbeddedServer.start(kind, tls=tls)
    except RuntimeError as exc:
        pytest.skip(f"{kind} here has no TLS: {str(exc)[:120]}")
    with made:
        yield ServerInfo(url=made.url, kind=request.param, owned=True, embedded=made)


@pytest.fixture
def fresh_server() -> Iterator[ServerInfo]:
    pytest.skip("a server of its own is the plain suite's matter")
    yield  # pragma: no cover
