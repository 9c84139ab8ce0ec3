"""Errors to exit statuses, in one place: any error is one line on stderr starting with
``fencing: `` and exit status 2; Ctrl-C is 130; a reader that went away (``| head``) is 0.

>>> exit_status(lambda: 0)
0
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

import redis.exceptions

from ..errors import FencingError


def exit_status(run: Callable[[], int]) -> int:
    """Run a command and return its exit status, turning every error into one."""
    try:
        return run()
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        print("fencing: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output went away (| head): not an error of ours. Point stdout
        # at /dev/null so the interpreter's final flush does not complain either.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except FencingError as exc:
        return _fail(_one_line(exc))
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        return _fail(f"lost the connection to Redis: {_one_line(exc)}")
    except redis.exceptions.RedisError as exc:
        return _fail(f"Redis refused a command: {_one_line(exc)}")
    except redis.exceptions.RedisClusterException as exc:  # not a RedisError
        return _fail(f"the Redis Cluster could not be used: {_one_line(exc)}")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _fail(message: str) -> int:
    print(f"fencing: {message}", file=sys.stderr)
    return 2
