"""`spex submit --redis` while Redis refuses writes for want of memory: one line that says so
(exit 2), not a traceback of `ResponseError`. A real Redis, the real command line."""

import subprocess
import sys

import redis


def test_submit_to_a_full_redis_says_so_in_one_line(redis_url):
    with redis.Redis.from_url(redis_url) as r:
        r.config_set("maxmemory", 1)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "spex.cli", "submit", "2+2?", "--redis", redis_url],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        finally:
            r.config_set("maxmemory", 0)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "spex: error: --redis: Redis is out of memory (maxmemory): "
        "command not allowed when used memory > 'maxmemory'; retry later"
    ]
