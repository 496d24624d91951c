"""Secure by default: auth fails closed, secrets stay private, errors never echo a password."""

import os
import subprocess
import sys

import pytest

from spex.services.launcher import embedded_redis
from spex.shared.runtime.settings import Settings


def test_an_ingress_told_to_use_tokens_but_given_none_refuses_to_start(tmp_path, redis_url):
    tokens = tmp_path / "tokens"
    tokens.write_text("# nobody yet\n\n")
    env = {
        **os.environ,
        "SPEX_REDIS_URL": redis_url,
        "SPEX_AUTH_TOKENS_FILE": str(tokens),
        "SPEX_HTTP_PORT": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "spex.services.ingress"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "spex ingress: error: SPEX_AUTH_TOKENS / SPEX_AUTH_TOKENS_FILE: set, but holds no tokens"
    )


def test_a_data_dir_others_can_read_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(ValueError, match=f"open to others \\(mode 755; .*run `chmod 700 {shared}`"):
        embedded_redis(shared)
    private = tmp_path / "private"
    embedded_redis(private)
    (private / "redis.password").chmod(0o644)
    with pytest.raises(ValueError, match="password file: .*run `chmod 600 "):
        embedded_redis(private)


def test_a_bad_redis_url_is_reported_without_its_password():
    with pytest.raises(ValueError) as err:
        Settings(redis_url="tcp://:s3cret@host:6379/0")
    assert "s3cret" not in str(err.value) and "host:6379" in str(err.value)
