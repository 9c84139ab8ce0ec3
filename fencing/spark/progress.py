"""``fencing.spark.rows`` for ``writeStream.format("fencing")``, counted in the driver's
process.

The data source sink's commit runs in a Python worker that Spark's JVM starts, not in the
driver's Python process, where the application installed its OpenTelemetry SDK. So the
commit leaves its batch's counts in a spool directory of the driver's host, one file per
micro-batch, and a :class:`RowsListener` (a ``StreamingQueryListener`` that
:func:`fencing.spark.register` adds to a classic session) counts them in the driver's
process when Spark reports the batch's progress, then removes them.

A commit writes only where the listener is: the listener makes its query's directory when
the query starts (Spark calls it before ``start()`` returns), and removes it when the query
ends. Under Spark Connect no listener runs in the client's process, so nothing is spooled.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .. import _telemetry as telemetry

log = logging.getLogger("fencing.spark.sink")


def spool(query_id: str) -> Path:
    """The directory where the commits of streaming query ``query_id`` leave their counts."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"fencing-spark-rows-{uid}" / query_id


def record(query_id: str, batch_id: int, topic: str, written: int, skipped: int) -> None:
    """Leave a committed batch's counts for the driver's listener, if one watches the
    query (its directory exists). Never raises: a count is not worth failing a batch."""
    where = spool(query_id)
    if not where.is_dir():
        return
    try:
        body = json.dumps({"topic": topic, "written": written, "skipped": skipped})
        partial = where / f".{batch_id}.{os.getpid()}"
        partial.write_text(body)
        partial.replace(where / f"{batch_id}.json")  # whole, or not there
    except OSError as exc:
        log.debug("redis-fencing spark sink: batch %d's counts not spooled: %s", batch_id, exc)


def drain(query_id: str) -> None:
    """Count what the commits of ``query_id`` left, and remove it."""
    where = spool(query_id)
    try:
        found = sorted(where.glob("*.json"))
    except OSError:
        return
    for path in found:
        try:
            counts = json.loads(path.read_text())
            path.unlink()
        except (OSError, ValueError):
            continue  # another listener of the query took it
        telemetry.spark_rows(counts["topic"], counts["written"], counts["skipped"])


def rows_listener() -> Any:
    """A new :class:`RowsListener` (its base class comes from PySpark, imported here)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener  # noqa: PLC0415

    class RowsListener(StreamingQueryListener):
        """Counts ``fencing.spark.rows`` in the driver's process for the queries that
        write with ``writeStream.format("fencing")``."""

        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
            spool(str(event.id)).mkdir(parents=True, exist_ok=True)

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's name
            drain(str(event.progress.id))

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's name
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's name
            drain(str(event.id))
            shutil.rmtree(spool(str(event.id)), ignore_errors=True)

    return RowsListener()
