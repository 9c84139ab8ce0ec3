"""``ForeachBatchSink``'s Spark tasks: ``mapInArrow`` functions that write, verify and
count one Spark partition, with the DataFrame API only (no RDD: Spark Connect has none).

Shipped by reference: executors import this module (the executor check imports it first).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .. import errors as _errors
from .._protocol.sink import Lineage
from .rows import arrow_rows
from .writer import PartitionResult, SinkConfig, verify_partition, write_batches

if TYPE_CHECKING:
    import pyarrow as pa

#: The schema of the tasks' result rows.
RESULT_SCHEMA = "result string"


def _spark_partition() -> int:
    from pyspark import TaskContext  # noqa: PLC0415 - runs in a Spark task

    context = TaskContext.get()
    assert context is not None, "runs inside a Spark task"
    return context.partitionId()


def _result_batch(texts: list[str]) -> pa.RecordBatch:
    import pyarrow as pa  # noqa: PLC0415 - the spark extra

    return pa.record_batch({"result": pa.array(texts, pa.string())})


def _checked_rows(lineage: Lineage, spark_partition: int, rows: Iterator[Any]) -> Iterator[Any]:
    """``rows``; refused if the task's partition lies beyond the batch's partition count
    (the batch's partitioning changed after it was counted) and holds rows."""
    if spark_partition < lineage.partitions:
        return rows
    first = next(rows, None)
    if first is None:
        return iter(())
    raise _beyond(lineage, spark_partition)


def _checked_batches(
    lineage: Lineage, spark_partition: int, batches: Iterable[pa.RecordBatch]
) -> Iterable[pa.RecordBatch]:
    """``batches``, refused as :func:`_checked_rows` refuses rows."""
    if spark_partition < lineage.partitions:
        return batches
    for batch in batches:
        if batch.num_rows:
            raise _beyond(lineage, spark_partition)
    return ()


def _beyond(lineage: Lineage, spark_partition: int) -> _errors.NondeterministicBatch:
    return _errors.NondeterministicBatch(
        f"micro-batch {lineage.batch_id} of query {lineage.query_id} has rows in Spark "
        f"partition {spark_partition}, but it was begun with {lineage.partitions} Spark "
        "partitions: its partitioning changed between two jobs. Nothing of that partition "
        "was written. Make the batch deterministic",
        app_id=lineage.app_id,
        query_id=lineage.query_id,
        batch_id=lineage.batch_id,
    )


def write_task(
    config: SinkConfig, lineage: Lineage, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: write this task's Spark partition; one result row (JSON)."""
    sp = _spark_partition()
    checked = _checked_batches(lineage, sp, batches)
    texts = [json.dumps(dataclasses.asdict(r)) for r in write_batches(config, lineage, sp, checked)]
    yield _result_batch(texts)


def verify_task(
    config: SinkConfig, lineage: Lineage, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: check a replayed partition against the chain points stored; one
    result row: the points missed, as a JSON list."""
    sp = _spark_partition()
    rows = _checked_rows(lineage, sp, arrow_rows(batches))
    yield _result_batch([json.dumps(list(verify_partition(config, lineage, sp, rows)))])


def count_task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: one row per task, whatever its partition holds."""
    for _ in batches:
        pass
    yield _result_batch([str(_spark_partition())])


def result_of(text: str) -> PartitionResult:
    """A write task's result row, back as a :class:`PartitionResult`."""
    found = json.loads(text)
    for name in ("per_target", "written_to", "skipped_to"):
        found[name] = {int(t): n for t, n in found[name].items()}
    return PartitionResult(**found)
