"""`spex bench --engine vllm --engine-url URL` and `spex profile --engine vllm --engine-url URL`
against a live server over real HTTP: a process of its own speaking vLLM's API
(`tests/serving/fake_vllm.py`: continuous batching by priority, a step that grows with the
batch, replies that depend on the seed and prompt alone). The real vLLM server is driven the
same way by `make test-vllm` (tests/serving/test_vllm.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spex.bench.comparison import ratio_ci95
from tests.serving.fake_vllm import ROOT, VERSION, serving


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving("--max-num-seqs", "8", "--step-ms", "1") as url:
        yield url


def spex(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spex.cli", *args], capture_output=True, text=True, timeout=600, cwd=ROOT
    )


def measure(server: str, out: Path, *sweep: str) -> dict:
    """`spex profile --engine vllm` of `server` over `sweep`: the report it wrote to `out`."""
    proc = spex("profile", "--engine", "vllm", "--engine-url", server, *sweep, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_a_compare_against_a_server_repeats_interleaved_pairs_and_records_the_server(server, tmp_path):
    out = tmp_path / "r.json"
    proc = spex(
        "bench", "--engine", "vllm", "--engine-url", server, "--algorithm", "rstar", "--target", "4",
        "--questions", "2", "--max-step-tokens", "32", "--reward", "logprob", "--mode", "compare",
        "--repeats", "3", "--max-running", "8", "--json", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["repeats"] == 3 and r["profile"] == "fake-model@vllm"
    pairs = r["pairs"]
    assert [p["order"] for p in pairs] == ["baseline-first", "spex-first", "baseline-first"]
    # The headline is over the pairs: their geometric mean, inside its interval.
    speedups = [p["speedup"] for p in pairs]
    assert r["speedup"] == pytest.approx(math.prod(speedups) ** (1 / 3))
    assert r["speedup_ci95"][0] <= r["speedup"] <= r["speedup_ci95"][1]
    assert r["tpot_ratio_ci95"][0] <= r["tpot_ratio"] <= r["tpot_ratio_ci95"][1]
    # Synthetic steps at their exact lengths on a batch-invariant server: every run grows the
    # same trees, and SPEX speculated and used what it speculated.
    assert r["trees_identical"] and r["lossless"]
    for p in pairs:
        assert p["spex"]["spec_issued"] > 0 and p["spex"]["spec_adopted"] > 0
        assert p["baseline"]["spec_issued"] == 0
        # What the server said of itself, and what was measured on it.
        server_info = p["spex"]["server"]
        assert server_info["engine"] == "vllm" and server_info["version"] == VERSION
        assert server_info["model"] == "fake-model" and server_info["enable_prefix_caching"] == "True"
        assert p["spex"]["primary_tpot_ms"] > 0 and p["baseline"]["primary_tpot_ms"] > 0
        # Each run has a prefix-cache namespace of its own (cache_salt): hits within the run only.
        assert 0 < p["baseline"]["prefix_cache_hit_rate"] < 1
        # The wall clock starts at the first request, not at the server's start-up checks.
        assert p["baseline"]["makespan_s"] <= p["baseline"]["wall_s"]
        assert p["baseline"]["level_batch_first_quarter"] is None  # a server's steps are not seen


def test_the_speedup_interval_is_a_t_interval_over_the_pairs_log_ratios():
    mean, low, high = ratio_ci95([1.0, 2.0])  # logs 0 and ln 2: mean ln2/2, sd ln2/√2, t(1) 12.706
    half = 12.706 * (math.log(2) / math.sqrt(2)) / math.sqrt(2)
    assert mean == pytest.approx(math.sqrt(2))
    assert (low, high) == pytest.approx((math.exp(math.log(2) / 2 - half), math.exp(math.log(2) / 2 + half)))
    assert ratio_ci95([1.3]) == pytest.approx((1.3, 1.3, 1.3))
    many = [1.0, 1.2] * 16  # 31 degrees of freedom, past the table: the normal's 1.96
    m, lo, _ = ratio_ci95(many)
    logs = [math.log(x) for x in many]
    sd = math.sqrt(sum((x - sum(logs) / 32) ** 2 for x in logs) / 31)
    assert lo == pytest.approx(m * math.exp(-1.96 * sd / math.sqrt(32)))
    with pytest.raises(ValueError, match="positive"):
        ratio_ci95([1.2, 0.0])


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


def test_the_oracle_bound_runs_as_interleaved_pairs_on_a_server(server, tmp_path):
    """`--mode compare --oracle`: the baseline's trees recorded once, then each pair's SPEX
    side speculates exactly them: the same trees, and every speculative job used."""
    out = tmp_path / "r.json"
    proc = spex(
        "bench", "--engine", "vllm", "--engine-url", server, "--algorithm", "rebase", "--target", "4",
        "--questions", "2", "--max-step-tokens", "32", "--reward", "logprob", "--mode", "compare",
        "--oracle", "--repeats", "2", "--max-running", "8", "--json", str(out), "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["repeats"] == 2 and r["trees_identical"] and r["lossless"]
    for p in r["pairs"]:
        assert p["spex"]["predictor"] == "oracle" and p["baseline"]["predictor"] == "auto"
        assert p["spex"]["spec_issued"] > 0 and p["spex"]["hit_rate"] == 1.0
        assert p["spex"]["spec_cancelled"] == 0 and p["compute_amplification"] == pytest.approx(1.0)


def test_a_server_profile_feeds_the_governor(server, tmp_path):
    profile = tmp_path / "p.json"
    report = measure(
        server, profile, "--batches", "1,4,8", "--contexts", "64,256", "--new-tokens", "8", "--repeats", "1"
    )
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
    # The governor read the primaries' time against the curve's counterfactual: it closed
    # windows (whether one moved the slack depends on what speculation cost the server then:
    # under the target with a pool that never bound, it stays where it starts).
    assert len(r["slack_end"]) == 1 and r["governor_trace"] and r["governor_trace"][-1][4] > 0


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
        (["--oracle"], "--oracle"),
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


def test_a_server_that_fails_mid_run_stops_the_run_with_one_line(tmp_path):
    """The server answers the start-up checks and some requests, then 500s: the run stops,
    naming the request and the server's answer, and the process exits (no thread left)."""
    with serving("--step-ms", "1", "--fail-after", "12") as url:  # the start-up probe is the first
        proc = spex(
            "bench", "--engine", "vllm", "--engine-url", url, "--algorithm", "rstar", "--target", "4",
            "--questions", "2", "--reward", "logprob", "--json", str(tmp_path / "r.json"), "--quiet",
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "failed request" in lines[0] and "500" in lines[0], proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_the_server_profile_reads_the_servers_step(server, tmp_path):
    """The fake's decode step is 1 ms + 0.25 ms a sequence: the differenced measure finds it."""
    report = measure(
        server, tmp_path / "p.json", "--batches", "1,8", "--contexts", "64", "--new-tokens", "32"
    )
    cells = {c["batch"]: c for c in report["cells"]}
    # A sleep never ends early, and overshoots more on a loaded machine: the step from below
    # (the differencing does not lose it), and loosely from above.
    assert 1.25e-3 <= cells[1]["tpot_s"] < 0.02
    assert 3.0e-3 <= cells[8]["tpot_s"] < 0.03
    assert cells[8]["first_token_s"] > 0


def test_the_server_profile_fits_a_per_request_cost_and_the_prefill_rate(tmp_path):
    """A server whose step that admits a request takes 30 ms more for it and 0.05 ms a prompt
    token: the profile's fit of the first-token times finds both (what the simulator charges)."""
    from spex.shared.roofline.measured import load_measured

    with serving("--step-ms", "1", "--request-ms", "30", "--prefill-ms-per-token", "0.05") as url:
        out = tmp_path / "p.json"
        measure(url, out, "--batches", "1,4", "--contexts", "256,512", "--new-tokens", "8", "--repeats", "2")
    report = json.loads(out.read_text())
    # The probe: one-token requests of a cached prompt, one at a time: its cost and one step.
    probe = report["meta"]["request_probe"]
    assert 0.031 <= probe["e2e_s"] < 0.06 and 0 <= probe["uncached"] < 16  # the fake's blocks: 16
    curve = load_measured(out)
    assert 0.030 <= curve.request_s < 0.045  # a sleep overshoots, HTTP adds: from below, loosely above
    assert curve.prefill_s_per_token == pytest.approx(5e-5, rel=0.3)
    # Without the probe, the fit of the first-token times alone finds one of the same size
    # (under it: requests sent together reach the server one by one, and wait less than all).
    del report["meta"]["request_probe"]
    out.write_text(json.dumps(report))
    assert 0.018 <= load_measured(out).request_s < 0.045
