"""Before the sink's first write: can the executors' Python import the library?

A Spark job whose executors lack redis-fencing (``PYSPARK_PYTHON`` not set, the package not
shipped) otherwise fails its first write task while unpickling it, in hundreds of lines of
Java and Python traces. :func:`check_executors` runs one tiny job first, through the
DataFrame API only (no ``sparkContext``, no RDD: it works on Spark Connect too), whose
Python UDF tries the import and returns the failure as a value, so that the driver raises
one line that says what to do.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The module the sink's tasks unpickle their function from: importing it imports the
#: library and what it needs (redis, ...).
EXECUTOR_MODULE = "fencing.spark.tasks"

_ADVICE = (
    "Set PYSPARK_PYTHON (or spark.pyspark.python) to an interpreter that has redis-fencing "
    "installed, or ship the package to the executors (--py-files, spark.submit.pyFiles or "
    "spark.addArtifacts(path, pyfile=True))"
)

# Failures of the Python worker itself, before any UDF runs; the one line of each is kept.
_WORKER_FAILURES = (
    re.compile(r"Cannot run program [^\n]*"),
    re.compile(r"\[PYTHON_VERSION_MISMATCH\][^\n]*"),
    re.compile(r"(?:ModuleNotFoundError|ImportError): No module named 'fencing[\w.]*'"),
)


def _reporter(module: str) -> Callable[[], str]:
    """The UDF the probe runs on an executor.

    A nested function, so that cloudpickle ships its code by value: unpickling it on an
    executor imports nothing of this library. Returns ``""`` when the import works, else
    the interpreter, its version and the error.
    """

    def report() -> str:
        import importlib  # noqa: PLC0415 - runs on the executor, shipped by value
        import sys  # noqa: PLC0415

        try:
            importlib.import_module(module)
        except Exception as exc:  # whatever stops the import is the answer
            return (
                f"their Python {sys.executable} ({sys.version.split()[0]}) reports "
                f"{type(exc).__name__}: {exc}"
            )
        return ""

    return report


def one_line(text: str) -> str:
    """``text`` with its runs of whitespace, newlines included, made single spaces."""
    return " ".join(text.split())


def executor_error(reason: str, *, outcome: str = "nothing was written") -> str:
    """The one-line message for executors that cannot run the sink's code: ``reason`` is
    what they reported, ``outcome`` what became of the batch.

    >>> executor_error("their Python /usr/bin/python3 (3.11.2) reports ...")[:60]
    'Spark executors cannot run redis-fencing: their Python /usr/'
    """
    return one_line(
        f"Spark executors cannot run redis-fencing: {reason.rstrip('. ')}. {_ADVICE}; {outcome}"
    )


def worker_failure(text: str) -> str | None:
    """The line of a Spark error that says a Python worker could not start or could not
    import the library, if the error holds one.

    >>> worker_failure('IOException: Cannot run program "/nope": error=2, No such file\\n\\tat ...')
    'their Python worker failed: Cannot run program "/nope": error=2, No such file'
    """
    for pattern in _WORKER_FAILURES:
        found = pattern.search(text)
        if found:
            return "their Python worker failed: " + found.group(0).strip()
    return None


def check_executors(spark: SparkSession) -> None:
    """Raise :class:`~fencing.ConfigurationError`, whose message is one line, unless a
    Python worker of ``spark``'s executors imports the sink's executor code.

    >>> check_executors(df.sparkSession)        # doctest: +SKIP
    Traceback (most recent call last):
    fencing.errors.ConfigurationError: Spark executors cannot run redis-fencing: their Python
    /usr/bin/python3 (3.11.2) reports ModuleNotFoundError: No module named 'fencing'. Set
    PYSPARK_PYTHON (or spark.pyspark.python) to an interpreter that has ...

    One task of a one-row DataFrame: the executors of an application share their Python
    setting, so one answers for all. (A write task that still meets an executor without the
    library fails the batch with the same line; see ``ForeachBatchSink``.) The line is also
    logged at ERROR: Spark prints its own report of the failed query, Java stack included,
    before ``awaitTermination()`` raises.
    """
    from pyspark.sql import functions as sf  # noqa: PLC0415 - PySpark is an optional extra
    from pyspark.sql.types import StringType  # noqa: PLC0415

    probe = sf.udf(_reporter(EXECUTOR_MODULE), StringType(), useArrow=False)
    try:
        rows = spark.range(0, 1, numPartitions=1).select(probe().alias("error")).collect()
    except Exception as exc:
        reason = worker_failure(str(exc))
        if reason is None:
            raise
        log.debug("redis-fencing spark sink: the executor check failed", exc_info=exc)
        fail(executor_error(reason))
    for row in rows:
        if row[0]:
            fail(executor_error(row[0]))


def fail(message: str) -> NoReturn:
    """Log ``message`` at ERROR, then raise it as a :class:`~fencing.ConfigurationError`
    with no chained cause (a cause would print before it, in Spark's report too)."""
    log.error("redis-fencing spark sink: %s", message)
    raise ConfigurationError(message) from None
