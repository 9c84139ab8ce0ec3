"""TODO docstring."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis

import fencing
import fencing.aio
from fencing.acl import SINCE_7_2, acl_rule
from fencing.embedded import EmbeddedServer


def test_cli_status_runs_as_the_documented_acl_user() -> None:
    """``fencing status`` / ``owners`` / ``elections`` list keys with SCAN, which
    fencing.acl.COMMANDS leaves out: as a user restricted to acl_rule() they exit 2 with
    "no permissions to run the 'scan' command" (``tail`` works). The CLI is the operator's
    tool for the very deployments the rule is for. Fix: fencing/acl.py COMMANDS: add
    "scan" (the key pattern still limits what it returns), or document a separate
    operator rule that has it."""
    with EmbeddedServer.start("redis") as made:
        with redis.Redis(port=made.port) as admin:
            try:
                admin.execute_command("WAITAOF", 0, 0, 0)
                without: tuple[str, ...] = ()
            except redis.exceptions.ResponseError:
                without = SINCE_7_2
            admin.execute_command(
                "ACL", "SETUSER", "fencing", *acl_rule("aclcli", password="pw", without=without)
            )
        url = f"redis://fencing:pw@127.0.0.1:{made.port}/0"
        client = fencing.Client.from_url(url, namespace="aclcli")
        with client.topic("orders", partitions=1).producer() as producer:
            producer.send(b"x", partition=0)
        client.close()
        env = dict(os.environ, FENCING_REDIS_URL=url, FENCING_NAMESPACE="aclcli")
        cli = Path(sys.executable).with_name("fencing")
        failed = {}
        for args in (["status"], ["status", "orders"], ["owners", "g"], ["elections"]):
            run = subprocess.run(
                [str(cli), *args], check=False, env=env, capture_output=True, text=True
            )
            if run.returncode != 0:
                failed[" ".join(args)] = (run.stdout + run.stderr).strip()[-120:]
        assert not failed, failed
