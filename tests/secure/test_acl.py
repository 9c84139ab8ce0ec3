"""The documented ACL rule (:func:`fencing.acl.acl_rule`) is enough for what an operator
runs against the deployments it is for: the CLI's status, owners and elections."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import fencing
import fencing.aio
from fencing.acl import acl_rule
from fencing.embedded import EmbeddedServer

from ..support.acl import unknown_commands


def test_cli_status_runs_as_the_documented_acl_user() -> None:
    """The CLI is the operator's tool for the very deployments the ACL rule is for: ``fencing
    status`` / ``owners`` / ``elections`` (which list keys with SCAN) run as a user restricted to
    :func:`fencing.acl.acl_rule`, as ``tail`` does."""
    with EmbeddedServer.start("redis") as made:
        with redis.Redis(port=made.port) as admin:
            without = unknown_commands(admin)
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


def test_a_user_without_the_rights_gets_a_typed_error_that_says_what_to_grant() -> None:
    """A user whose ACL does not cover the client's namespace (keys outside its pattern) is
    refused by the server before the script runs: ConfigurationError naming the rule to
    grant, not a bare "unexpected reply", and nothing written."""
    with EmbeddedServer.start("redis") as made, redis.Redis(port=made.port) as admin:
        without = unknown_commands(admin)
        admin.execute_command(
            "ACL", "SETUSER", "fencing", *acl_rule("granted", password="pw", without=without)
        )
        url = f"redis://fencing:pw@127.0.0.1:{made.port}/0"
        with fencing.Client.from_url(url, namespace="other") as client:
            topic = client.topic("orders", partitions=1)
            with pytest.raises(fencing.ConfigurationError, match=r"acl_rule\('other'"):
                topic.producer().send(b"x")
        assert admin.keys("*") == []
