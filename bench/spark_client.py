"""The client work of a Spark sink task per row, without Spark or a server (A/B, alternating).

    .venv/bin/python -m bench.spark_client            # 50,000 rows x 7 rounds
    .venv/bin/python -m bench.spark_client --quick    # 20,000 rows x 3 rounds

One fixed Arrow batch shaped as ``bench.spark_sink``'s rows (a 100-byte string value and a
string key of 1,000 distinct values) is written by one task to a topic of 4 partitions in
chunks of 500 rows, the script calls recorded instead of run
(:mod:`tests.support.sink_calls`): what is measured is the executor's own CPU
(``time.process_time``) from the Arrow batch to the built calls: routing, encoding, chain
hashes, the calls' arguments. The two ways a task can take run in alternating rounds in one
process: Python rows (every column as Python objects, then row by row) and Arrow columns
(partitions and encodings over whole columns, then the chain row by row).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import pyarrow as pa

from fencing._protocol.sink import Lineage
from fencing.spark.rows import RowLayout, arrow_rows
from fencing.spark.writer import SinkConfig, write_batches, write_partition
from tests.support.sink_calls import recorded_calls

PARTITIONS = 4
LINEAGE = Lineage("bench", "q-1", 7, 4)


def rows_batch(n: int) -> pa.RecordBatch:
    """``bench.spark_sink``'s rows: "<id>:" and 90 x's as the value, id % 1000 as the key."""
    values = [f"{i}:" + "x" * 90 for i in range(n)]
    keys = [str(i % 1000) for i in range(n)]
    return pa.record_batch({"v": pa.array(values, pa.string()), "k": pa.array(keys, pa.string())})


def config() -> SinkConfig:
    return SinkConfig(None, None, "orders", RowLayout(("v", "k"), 0, 1, (), None), 500, 1 << 20, 30)


def by_rows(batch: pa.RecordBatch) -> None:
    for _ in write_partition(config(), LINEAGE, 0, arrow_rows([batch])):
        pass


def by_columns(batch: pa.RecordBatch) -> None:
    for _ in write_batches(config(), LINEAGE, 0, [batch]):
        pass


WAYS: dict[str, Callable[[pa.RecordBatch], None]] = {
    "Python rows": by_rows,
    "Arrow columns": by_columns,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, rounds = (20_000, 3) if args.quick else (50_000, 7)
    batch = rows_batch(n)
    per_row: dict[str, list[float]] = {name: [] for name in WAYS}
    with recorded_calls(PARTITIONS) as calls:
        for r in range(rounds):
            order = list(WAYS) if r % 2 == 0 else list(reversed(WAYS))
            for name in order:
                calls.clear()
                gc.collect()
                start = time.process_time()
                WAYS[name](batch)
                per_row[name].append((time.process_time() - start) / n * 1e6)
    print(f"{n:,} rows, {rounds} rounds, median CPU per row (process_time):")
    first = statistics.median(per_row[next(iter(WAYS))])
    for name, found in per_row.items():
        m = statistics.median(found)
        print(f"  {name:<14} {m:6.2f} us/row  ({first / m:4.2f}x of {next(iter(WAYS))})")


if __name__ == "__main__":
    main()
