"""`spex bench --engine vllm --engine-url URL` and `spex profile --engine vllm --engine-url URL`
against a live server over real HTTP: a process of its own speaking vLLM's API
(`tests/serving/fake_vllm.py`: continuous batching by priority, a step that grows with the
batch, replies that depend on the seed and prompt alone). The real vLLM server is driven the
same way by `make test-vllm` (tests/serving/test_vllm.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from spex.bench.results import ratio_ci95
from tests.serving.fake_vllm import ROOT, VERSION, serving


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving("--max-num-seqs", "8", "--step-ms", "1") as url:
        yield url


def spex(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spex.cli", *args], capture_output=True, text=True, timeout=600, cwd=ROOT
    )


def test_a_compare_against_a_server_repeats_interleaved_pairs_and_records_the_server(server, tmp_path):
    out = tmp_path / "r.json"
    proc = spex(
        "bench", "--engine", "vllm", "--engine-url", server, "--algorithm", "rstar", "--target", "4",
        "--questions", "2", "--max-step-tokens", "32", "--reward", "logprob", "--mode", "compare",
        "--repeats", "3", "--max-running", "8", "--json", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["repeats"] == 3
    assert [p["order"] for p in r["pairs"]] == ["baseline-first", "spex-first", "baseline-first"]
    # The headline is over the pairs: a geometric mean inside its interval.
    speedups = [p["speedup"] for p in r["pairs"]]
    assert r["speedup"] == pytest.approx(ratio_ci95(speedups)[0])
    low, high = r["speedup_ci95"]
    assert low <= r["speedup"] <= high
    assert r["tpot_ratio_ci95"][0] <= r["tpot_ratio"] <= r["tpot_ratio_ci95"][1]
    # Synthetic steps at their exact lengths on a batch-invariant server: every run grows the
    # same trees, and SPEX speculated and used what it speculated.
    assert r["trees_identical"] and r["lossless"]
    assert r["spex"]["spec_issued"] > 0 and r["spex"]["spec_adopted"] > 0
    assert r["baseline"]["spec_issued"] == 0
    # What the server said of itself, and what was measured on it.
    server_info = r["spex"]["server"]
    assert server_info["engine"] == "vllm" and server_info["version"] == VERSION
    assert server_info["model"] == "fake-model" and server_info["enable_prefix_caching"] == "True"
    assert r["profile"] == "fake-model@vllm"
    assert r["spex"]["primary_tpot_ms"] > 0 and r["baseline"]["primary_tpot_ms"] > 0
    assert r["spex"]["prefix_cache_hit_rate"] > 0
    # The wall clock starts at the first request, not at the server's start-up checks.
    assert r["baseline"]["makespan_s"] <= r["baseline"]["wall_s"]


def test_real_content_from_a_server_is_graded_and_lossless(server, tmp_path):
    out = tmp_path / "r.json"
    proc = spex(
        "bench", "--engine", "vllm", "--engine-url", server, "--dataset", "easy", "--algorithm", "rebase",
        "--target", "4", "--questions", "2", "--reward", "logprob", "--param", "max_depth=4",
        "--mode", "compare", "--json", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["trees_identical"] and r["lossless"], r["max_reward_difference"]
    answers = r["spex"]["answers"]
    assert len(answers) == 2 and all(a is not None for a in answers.values())
    assert r["spex"]["step_tokens_p50"] > 0


def test_a_server_profile_feeds_the_governor(server, tmp_path):
    profile = tmp_path / "p.json"
    proc = spex(
        "profile", "--engine", "vllm", "--engine-url", server, "--batches", "1,4,8", "--contexts", "64,256",
        "--new-tokens", "8", "--repeats", "1", "--json", str(profile),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(profile.read_text())
    cells = {(c["batch"], c["context"]): c["tpot_s"] for c in report["cells"]}
    assert set(cells) == {(b, c) for b in (1, 4, 8) for c in (64, 256)}
    assert all(t > 0 for t in cells.values())
    assert report["meta"]["server"]["version"] == VERSION and report["meta"]["kv_capacity_tokens"] > 0
    out = tmp_path / "r.json"
    proc = spex(
        "bench", "--engine", "vllm", "--engine-url", server, "--algorithm", "rstar", "--target", "4",
        "--questions", "2", "--reward", "logprob", "--mode", "spex", "--profile-file", str(profile),
        "--max-running", "8", "--json", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["spec_issued"] > 0
    # The governor read the primaries' time against the curve's counterfactual and moved the
    # slack from where it starts (the fixed pool never does).
    assert len(r["slack_end"]) == 1 and r["slack_end"] != [0.10]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--engine", "vllm"], "--engine-url"),
        (["--engine", "vllm", "--engine-url", "ftp://x"], "engine_url"),
        (["--engine", "sglang", "--engine-url", "http://127.0.0.1:1"], "--prm-url"),
        (["--engine-url", "http://127.0.0.1:1"], "engine_url"),
        (
            ["--engine", "vllm", "--engine-url", "http://x:1", "--reward", "logprob", "--deterministic"],
            "deterministic",
        ),  # fmt: skip
        (["--repeats", "3"], "--repeats"),
        (["--mode", "compare", "--repeats", "0"], "--repeats"),
    ],
)
def test_bad_server_flags_are_one_line_naming_the_flag(args, field, tmp_path):
    proc = spex("bench", *args, "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr


def test_a_server_that_is_not_vllm_is_one_line(server, tmp_path):
    """The URL answers, but not as vLLM with priority scheduling would: named, no traceback."""
    proc = spex(
        "bench", "--engine", "sglang", "--engine-url", server, "--reward", "logprob",
        "--json", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "engine_url" in lines[0] and "sglang" in lines[0], proc.stderr
