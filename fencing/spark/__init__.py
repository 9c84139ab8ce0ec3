"""PySpark and redis-fencing: the ``fencing`` data source (a source and an exactly-once sink,
batch and streaming) and an exactly-once foreachBatch sink.

>>> import fencing.spark
>>> fencing.spark.register(spark)                                     # doctest: +SKIP
>>> df = spark.readStream.format("fencing").option("topic", "orders").load()  # doctest: +SKIP
>>> (df.select("key", "value").writeStream.format("fencing")
...    .option("topic", "copy").option("appId", "etl")
...    .option("checkpointLocation", "/ck").start())                  # doctest: +SKIP
>>> from fencing.spark import ForeachBatchSink
>>> sink = ForeachBatchSink("redis://localhost:6379/0", "events", app_id="etl")
>>> df.writeStream.foreachBatch(sink).option("checkpointLocation", "/ck").start()  # doctest: +SKIP

Needs PySpark (``pip install 'redis-fencing[spark]'``) where the query runs; importing this
module does not.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import ConfigurationError
from .connect import is_connect
from .progress import rows_listener
from .sink import BatchMetrics, ForeachBatchSink

__all__ = ["BatchMetrics", "ForeachBatchSink", "register"]

#: The attribute of a session that holds its rows listener (added once).
_LISTENER = "_fencing_rows_listener"

_INSTALL = "pip install 'redis-fencing[spark]' (pyspark>=4.2 and pyarrow>=15)"


def register(spark: Any) -> None:
    """Register the ``fencing`` data source with ``spark`` (a SparkSession, classic or Spark
    Connect), so that ``spark.read``/``spark.readStream.format("fencing")`` read topics and
    ``df.write``/``df.writeStream.format("fencing")`` write them. Calling it again does no
    harm.

    >>> import fencing.spark
    >>> fencing.spark.register(spark)
    >>> df = (spark.read.format("fencing")
    ...       .option("url", "redis://localhost:6379/0")
    ...       .option("topic", "orders")
    ...       .load())                                                # doctest: +SKIP
    >>> df.select("partition", "offset", "key", "value").show()      # doctest: +SKIP

    The options and columns are those of :class:`fencing.spark.source.FencingDataSource`
    (reads) and :mod:`fencing.spark.datasink` (writes).
    On a classic session it also adds a ``StreamingQueryListener`` that counts
    ``fencing.spark.rows`` in this process for ``writeStream.format("fencing")`` queries
    (their commits run in Python workers of Spark's own; see :mod:`fencing.spark.progress`).
    Raises :class:`~fencing.ConfigurationError` if PySpark is older than 4.2 (no Python
    stream sources with admission control) or pyarrow is missing (Spark moves the rows as
    Arrow batches).
    """
    try:
        import pyspark  # noqa: PLC0415 - PySpark is an optional extra
    except ImportError:
        raise ConfigurationError(f"fencing.spark.register needs PySpark: {_INSTALL}") from None
    version = getattr(pyspark, "__version__", "0")
    if tuple(int(n) for n in version.split(".")[:2] if n.isascii() and n.isdigit()) < (4, 2):
        raise ConfigurationError(
            f"the fencing data source needs PySpark 4.2 or later (Python data sources with "
            f"admission control and Arrow stream writers), "
            f"found PySpark {version}: {_INSTALL}"
        )
    try:
        importlib.import_module("pyarrow")
    except ImportError:
        raise ConfigurationError(
            f"the fencing data source needs pyarrow (Spark moves its rows as Arrow batches): "
            f"{_INSTALL}"
        ) from None
    from .source import FencingDataSource  # noqa: PLC0415 - imports pyspark.sql.datasource

    spark.dataSource.register(FencingDataSource)
    if not is_connect(spark) and getattr(spark, _LISTENER, None) is None:
        listener = rows_listener()
        spark.streams.addListener(listener)
        setattr(spark, _LISTENER, listener)
