"""The wire fuzz tests' fixtures (an event loop thread and a Redis per module, a `Fuzz` cluster
per test); the fuzz tests report how many cases each one ran."""

import pytest
import redis
import structlog

from spex.shared.runtime.redis_server import RedisServer
from tests.fuzz.harness import CASES, NOTES, Fuzz, Loop


@pytest.fixture(scope="module")
def loop():
    runner = Loop()
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def server():
    """One Redis for the module (the suite's `redis_url` is parametrized over server kinds)."""
    with RedisServer() as s:
        yield s


@pytest.fixture
def fuzz(loop, server):
    client = redis.Redis.from_url(server.url)
    client.flushall()
    client.close()
    with structlog.testing.capture_logs() as logs:
        f = Fuzz(loop, server.url, logs)
        try:
            yield f
        finally:
            f.close()


def pytest_terminal_summary(terminalreporter):
    if not CASES:
        return
    terminalreporter.section("fuzz cases")
    for test, c in sorted(CASES.items()):
        terminalreporter.write_line(f"{test}: {c['examples']} examples, {c['entries']} fuzzed inputs")
        if test in NOTES:
            terminalreporter.write_line(f"    {NOTES[test]}")
