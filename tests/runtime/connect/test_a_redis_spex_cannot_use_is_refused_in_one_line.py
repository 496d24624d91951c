"""A Redis SPEX cannot use is refused before anything starts, in one line that names what to
change: a read-only replica, a Redis Cluster node without SPEX_REDIS_CLUSTER (and the setting
without a cluster), a password wanted and not given, or refused. Each used to pass the start
check (a PING) and crash-loop the services (`ReadOnlyError`, `MovedError`; "HELLO must be
called with the client already authenticated"). Real servers; `spex up --redis` and a
service's entry point as processes."""

import os
import subprocess
import sys

import pytest
import redis

from spex.shared.runtime.connect import check_redis
from spex.shared.runtime.redis_server import RedisServer, free_port, redis_binaries
from spex.shared.runtime.settings import Settings

BINARY = redis_binaries()["6.2"]


@pytest.fixture(scope="module")
def replica():
    with RedisServer(BINARY) as primary, RedisServer(BINARY) as replica:
        with redis.Redis.from_url(replica.url) as r:
            r.replicaof("127.0.0.1", primary.port)
        yield primary, replica


def test_a_replica_is_refused_naming_its_primary(replica):
    primary, server = replica
    with pytest.raises(ValueError) as refused:
        check_redis(Settings(redis_url=server.url))
    assert str(refused.value) == (
        f"{server.url} is a read-only replica (its primary: 127.0.0.1:{primary.port}): "
        "point SPEX_REDIS_URL (spex up: --redis) at the primary"
    )
    check_redis(Settings(redis_url=primary.url))  # the primary is fine


def test_spex_up_on_a_replica_is_one_line_before_anything_starts(replica):
    _, server = replica
    done = subprocess.run(
        [sys.executable, "-m", "spex.cli", "up", "--redis", server.url, "--port", str(free_port())],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("spex: error: ") and "is a read-only replica" in line


def test_a_service_started_on_a_replica_says_why_and_exits_2(replica):
    _, server = replica
    env = {**os.environ, "SPEX_REDIS_URL": server.url, "SPEX_CONSUMER": "coord-0"}
    done = subprocess.run(
        [sys.executable, "-m", "spex.services.coordinator"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("spex coordinator: error: ")
    assert "is a read-only replica" in done.stderr


def test_a_cluster_node_without_the_setting_is_refused_naming_it():
    node = RedisServer(redis_binaries()["valkey"], cluster_node_timeout_ms=1000)  # 6.2 lacks cluster-port
    cluster_node = r"is a node of a Redis Cluster \(cluster_enabled:1\): set SPEX_REDIS_CLUSTER=1"
    with node, pytest.raises(ValueError, match=cluster_node):
        check_redis(Settings(redis_url=node.url))
    not_cluster = r"^SPEX_REDIS_CLUSTER: set, but .* is not a cluster node"
    with RedisServer(BINARY) as plain, pytest.raises(ValueError, match=not_cluster):
        check_redis(Settings(redis_url=plain.url, redis_cluster=True, partitions=4))


def test_a_missing_or_wrong_password_says_where_one_goes(tmp_path):
    with RedisServer(BINARY, password="the-right-password-123") as server:
        with pytest.raises(ValueError) as missing:
            check_redis(Settings(redis_url=server.url))
        assert str(missing.value) == (
            f"Redis at {server.url} needs a password: put it in a file and set SPEX_REDIS_PASSWORD_FILE "
            "(spex up: --redis-password-file), or set SPEX_REDIS_PASSWORD"
        )
        secret = tmp_path / "pw"
        secret.write_text("wrong-password\n")
        with pytest.raises(ValueError) as wrong:
            check_redis(Settings(redis_url=server.url, redis_password_file=str(secret)))
        assert str(wrong.value).startswith(
            f"Redis at {server.url} refused the password given by SPEX_REDIS_PASSWORD_FILE ({secret}): "
        )
        assert "wrong-password" not in str(wrong.value)
        check_redis(Settings(redis_url=server.url, redis_password="the-right-password-123"))
