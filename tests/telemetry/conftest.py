"""The telemetry tests' fixtures: the process's providers read in memory, reset per test,
and a topic name of the test's own (the attributes name topics, not namespaces)."""

from __future__ import annotations

import uuid

import pytest

from ..support.telemetry import Recorded, install


@pytest.fixture
def recorded() -> Recorded:
    """What the library records from now on, in memory."""
    found = install()
    found.reset()
    return found


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:10]}"
