"""Exactly-once writes from PySpark Structured Streaming into topics.

>>> from fencing.spark import ForeachBatchSink
>>> sink = ForeachBatchSink("redis://localhost:6379/0", "events", app_id="etl")
>>> df.writeStream.foreachBatch(sink).option("checkpointLocation", "/ck").start()  # doctest: +SKIP

Needs PySpark (``pip install 'redis-fencing[spark]'``) where the query runs; importing this
module does not.
"""

from .sink import BatchMetrics, ForeachBatchSink

__all__ = ["BatchMetrics", "ForeachBatchSink"]
