"""A server that refuses the client's credentials or rights is named as such: a
ConfigurationError that says what to fix (never Unavailable retried for ever, nor a bare
"unexpected reply"), and missing channel rights are warned about once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
import redis

import fencing
from fencing import AccessMode
from fencing.acl import acl_rule
from fencing.embedded import EmbeddedServer

from ..support.acl import unknown_commands
from ..support.cli import one_error_line, run
from ..support.polling import wait_until


@pytest.fixture(scope="module")
def made() -> Iterator[EmbeddedServer]:
    with EmbeddedServer.start("redis") as server, redis.Redis(port=server.port) as admin:
        without = unknown_commands(admin)
        admin.execute_command(
            "ACL", "SETUSER", "ok", *acl_rule("ns", password="pw", without=without)
        )
        admin.execute_command(
            "ACL", "SETUSER", "notime", *acl_rule("ns", password="pw", without=(*without, "time"))
        )
        deaf = [r if r != "&ns:*" else "&elsewhere:*" for r in acl_rule("ns", password="pw")]
        admin.execute_command("ACL", "SETUSER", "deaf", *[r for r in deaf if r[1:] not in without])
        yield server


@pytest.mark.parametrize("allow_eviction", [None, True])
def test_a_wrong_password_is_a_configuration_error(
    made: EmbeddedServer, allow_eviction: bool | None
) -> None:
    url = f"redis://ok:wrong@127.0.0.1:{made.port}/0"
    client = fencing.Client.from_url(url, namespace="ns", allow_eviction=allow_eviction)
    with client, pytest.raises(fencing.ConfigurationError) as caught:
        client.topic("orders", partitions=1).open()
    message = str(caught.value)
    assert message.startswith("Redis refused the client's credentials (")
    assert "check the user name and password in the URL" in message
    assert "wrong" not in message  # the password is not repeated


def test_the_cli_says_the_credentials_are_wrong(made: EmbeddedServer, capsys) -> None:
    url = f"redis://ok:wrong@127.0.0.1:{made.port}/0"
    code, out, err = run(capsys, "status", "--url", url, "--namespace", "ns")
    assert (code, out) == (2, "")
    assert one_error_line(err).startswith("fencing: Redis refused the client's credentials")


def test_a_command_a_script_may_not_run_is_named_with_what_to_grant(made: EmbeddedServer) -> None:
    url = f"redis://notime:pw@127.0.0.1:{made.port}/0"
    client = fencing.Client.from_url(url, namespace="ns")
    with client, pytest.raises(fencing.ConfigurationError) as caught:
        client.topic("orders", partitions=1).open()
    message = str(caught.value)
    assert message.startswith("topic_open: the Redis user may not run TIME, which the script calls")
    assert "Grant it: ACL SETUSER <user> +time (fencing.acl.acl_rule('ns')" in message


def test_missing_channel_rights_are_warned_once_and_waiters_still_take_over(
    made: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fencing._runtime.notify")
    url = f"redis://deaf:pw@127.0.0.1:{made.port}/0"
    with fencing.Client.from_url(url, namespace="ns") as client:
        topic = client.topic("deaf", partitions=1)
        holder = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=1.5)
        got: list[fencing.Producer] = []
        thread = threading.Thread(
            target=lambda: got.append(
                topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=1.5, wait_timeout=30)
            )
        )
        thread.start()
        wait_until(lambda: len(caplog.records) >= 1, timeout=10)
        holder.close()
        thread.join(30)
        (waiter,) = got
        assert waiter.epoch(0) == 2
        waiter.close()
    # (Only the notifier's warnings: a lease renewal a busy machine delays logs its own.)
    warned = [r.getMessage() for r in caplog.records if r.name.startswith("fencing._runtime")]
    assert len(warned) == 1, warned
    assert warned[0].startswith("redis-fencing: the Redis user may not subscribe")
    assert "&<namespace>:*" in warned[0]
