"""`spex up --reward`, `--prm-url` and `--prm-engine`: the flags set the settings, and a reward
that cannot be computed is one line naming the flags, before anything starts."""

import subprocess
import sys
import time

import pytest

from spex.cli.main import build_parser
from spex.cli.runtime import up_settings

GEN = ["--engine", "vllm", "--engine-url", "http://127.0.0.1:1"]


def settings(*flags):
    return up_settings(build_parser().parse_args(["up", *flags]))


def test_the_flags_set_the_reward_and_where_its_model_is_served():
    s = settings(*GEN, "--prm-url", "http://prm:8001", "--prm-engine", "vllm")
    assert (s.step_reward, s.prm_url, s.prm_engine, s.prm) == ("prm", "http://prm:8001", "vllm", "")
    assert settings(*GEN).step_reward == "logprob"  # real content, no reward model
    assert settings(*GEN, "--prm-url", "http://prm:8001", "--reward", "logprob").step_reward == "logprob"


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        ((*GEN, "--reward", "prm"), ["--reward", "--prm DIR", "--prm-url URL"]),
        (("--reward", "logprob"), ["--reward", "real content only"]),  # sim: synthetic content
        ((*GEN, "--prm-url", "http://a:1,http://b:1"), ["--prm-url", "one http:// or https:// URL"]),
    ],
)
def test_a_reward_that_cannot_work_names_the_flags(flags, names):
    with pytest.raises(ValueError) as refused:
        settings(*flags)
    assert all(name in str(refused.value) for name in names), refused.value


def test_spex_up_refuses_it_in_one_line_before_anything_starts(tmp_path):
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "spex.cli", "up", *GEN, "--reward", "prm", "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("spex: error: --reward / "), (
        proc.stderr
    )
    assert not (tmp_path / "d").exists()  # no Redis, no service: nothing started
    assert time.monotonic() - start < 60
