"""The ``fencing`` command. For now: version and the ownership rows of a group."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import redis.exceptions

from . import __version__
from .client import Client
from .errors import FencingError
from .keys import decode_resource
from .text import text


def _owners(args: argparse.Namespace) -> int:
    client = Client.from_url(args.url, namespace=args.namespace, allow_eviction=True)
    keys = client.keys
    pattern = f"{keys.namespace}:{{*}}:own:{args.group}"
    r = client._driver(client._budget_default().timeout).redis
    rows = []
    for key in sorted(r.scan_iter(match=pattern, count=500)):
        name = text(key)
        resource = decode_resource(name[len(keys.namespace) + 2 : name.rindex("}:own:")])
        row = {text(k): text(v) for k, v in r.hgetall(key).items()}
        rows.append({"resource": resource, **row})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            holder = row.get("label") if row.get("session") else "(free)"
            print(
                f"{row['resource']}\tholder={holder}\tgeneration={row.get('gen')}\t"
                f"token={row.get('token')}\texpires_ms={row.get('expires')}"
            )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fencing`` console script."""
    parser = argparse.ArgumentParser(
        prog="fencing",
        description="redis-fencing: single-writer guarantees for Redis Streams.",
        epilog="example: fencing owners journal --url redis://localhost:6379/0",
    )
    parser.add_argument("--version", action="version", version=f"redis-fencing {__version__}")
    sub = parser.add_subparsers(dest="command")
    owners = sub.add_parser("owners", help="show the ownership rows of a group")
    owners.add_argument("group")
    owners.add_argument("--url", default=None, help="Redis URL (default: FENCING_REDIS_URL)")
    owners.add_argument("--namespace", default=None, help="key namespace (default: fencing)")
    owners.add_argument("--json", action="store_true", help="print JSON for scripts")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return _owners(args)
    except (FencingError, redis.exceptions.RedisError, ValueError) as exc:
        print(f"fencing: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
