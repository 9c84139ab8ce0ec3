"""``ForeachBatchSink`` under Spark Connect: the streaming query a micro-batch belongs to.

A ``foreachBatch`` function runs in a Python process of the Connect server, with a session
that is a clone holding no query and no ``sparkContext``. The sink records the client's
session id when it is pickled; this module opens that session from the server process and
finds the query there.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Set by Spark Connect in the Python process that runs a query's foreachBatch function:
#: the URL of the Connect server it belongs to.
CONNECT_URL_VARIABLE = "SPARK_CONNECT_LOCAL_URL"

_roots_lock = threading.Lock()
_roots: dict[str, Any] = {}  # client session id: a Connect SparkSession


def is_connect(session: SparkSession) -> bool:
    return type(session).__module__.startswith("pyspark.sql.connect")


def connect_session_id() -> str | None:
    """The id of this process's active Spark Connect session, if it has one."""
    connect = sys.modules.get("pyspark.sql.connect.session")
    if connect is None:  # no Connect session was ever made here
        return None
    try:
        session = connect.SparkSession.active()
    except Exception:  # no active or default Connect session
        return None
    found: str = session.session_id
    return found


def connect_root(session: SparkSession, client_session: str | None) -> SparkSession:
    """The Connect session the query was started from, as seen from the foreachBatch
    process (whose own session is a clone holding no query), opened once per process and
    never stopped: stopping it would end the client's session. Outside that process (a
    test calling the sink), ``session`` itself."""
    url = os.environ.get(CONNECT_URL_VARIABLE)
    if not url or not client_session or client_session == getattr(session, "session_id", None):
        return session
    with _roots_lock:
        root: Any = _roots.get(client_session)
        if root is None:
            from pyspark.sql.connect.session import (  # noqa: PLC0415 - optional extra
                SparkSession as ConnectSession,
            )

            root = ConnectSession.builder.remote(f"{url};session_id={client_session}").create()
            _roots[client_session] = root
        found: SparkSession = root
        return found


def connect_query_id(root: SparkSession, batch_id: int) -> str | None:
    """The id of the query of ``root`` that runs batch ``batch_id`` now; None if it has no
    active query. Several candidates are refused: the sink cannot tell them apart."""
    active = list(root.streams.active)
    if len(active) <= 1:
        return active[0].id if active else None
    running = []
    for query in active:
        if not query.status.get("isTriggerActive"):
            continue
        progress = query.lastProgress
        if progress is not None and int(progress.get("batchId", -1)) >= batch_id:
            continue
        running.append(query.id)
    if len(running) == 1:
        return running[0]
    raise ConfigurationError(
        f"ForeachBatchSink under Spark Connect: {len(running) or len(active)} streaming "
        f"queries of the client's session may be running batch {batch_id}, and the sink "
        "cannot tell which is its own. Start each ForeachBatchSink query from a Spark "
        "Connect session of its own (SparkSession.builder.remote(url).create())"
    )
