"""The conformance subset (``cases.py``), run on the real servers and on fencing.testing.

Each case runs against Redis 7 and Valkey 8 (the suite's ``client`` fixture) and against
:func:`fencing.testing.memory_client` on fakeredis: the in-memory client users test with
must behave as a real server does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import fencing
from fencing.testing import memory_client

from .cases import CASES, Case

pytest.importorskip("fakeredis")


def _name(case: Case) -> str:
    return case.__name__


@pytest.fixture
def memory() -> Iterator[fencing.Client]:
    """A client on a new in-memory server, in a namespace of its own."""
    client = memory_client("t" + uuid.uuid4().hex[:12])
    yield client
    client.close()


@pytest.mark.parametrize("case", CASES, ids=_name)
def test_on_a_real_server(case: Case, client: fencing.Client) -> None:
    case(client)


@pytest.mark.parametrize("case", CASES, ids=_name)
def test_in_memory(case: Case, memory: fencing.Client) -> None:
    case(memory)
