"""The `spex` command line: bad input gets one line naming the field; listings work."""

import json
import subprocess
import sys

import pytest

from spex.bench.results import WALL_CLOCK_FIELDS
from spex.cli.main import main


def spex(*args, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "spex.cli", *args], capture_output=True, text=True, timeout=300
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["bench", "--target", "x"], "--target"),
        (["bench", "--algorithm", "bfs"], "--algorithm"),
        (["bench", "--set", "nope=1"], "nope"),
        (["bench", "--profile", "Llemma-7B@TPU"], "TPU"),
        (["bench", "--profile", "Llemma-34B@A6000"], "does not fit"),
        (["bench", "--batch-size", "0"], "batch_size"),
        (["bench", "--param", "exploration=high"], "exploration"),
        (["bench", "--algorithm", "rstar", "--param", "nope=1"], "nope"),
        (["profile", "--gpu", "A6000"], "--model"),
        (["profile", "--gpu", "H100", "--model", "Llama-2-7B", "--batches", "1,x"], "--batches"),
        (["profile", "--engine", "hf", "--model", "/no/such/dir"], "--model"),
        (["bench", "--profile-file", "/no/such.json"], "--profile-file"),
        (["bench", "--engine", "hf"], "--model"),
        (["bench", "--engine", "hf", "--model", "/no/such/dir"], "model"),
        (["bench", "--dataset", "math500"], "--engine hf"),
        (["bench", "--content", "real"], "--engine hf"),
        (["model", "init", "--out", "/tmp/x", "--hidden", "0"], "--hidden"),
        (["bench", "--workers", "0"], "workers"),
        (["bench", "--routing", "random"], "--routing"),
        (["up", "--engine", "vllm"], "SPEX_ENGINE_URL"),
        (["bench", "--step-split", "paragraph"], "--step-split"),
        (["bench", "--min-step-tokens", "300"], "min_step_tokens"),
        (["bench", "--max-step-tokens", "0"], "step_token_cap"),
        (["up", "--min-step-tokens", "-1"], "SPEX_MIN_STEP_TOKENS"),
        (["up", "--profile-file", "/no/such.json"], "--profile-file"),
        (["up", "--objective", "latency"], "--objective"),
        (["bench", "--objective", "latency"], "--objective"),
        (["bench", "--predictor", "oracle"], "--predictor"),
        (["bench", "--mode", "compare", "--oracle", "--predictor", "lookahead"], "--oracle"),
        (["up", "--predictor", "mine"], "--predictor"),
        (["demo", "--questions", "0"], "--questions"),
        (["model", "init", "--out", "/tmp/x", "--prm-kind", "step-tag"], "--prm-kind"),
        (["bench", "--prompt-preset", "sal"], "--prompt-preset"),
        (["bench", "--chat-template", "/no/such.jinja"], "chat_template"),
        (["bench", "--prm-tokens", "+"], "prm_tokens"),
        (["up", "--chat-template", "/no/such.jinja"], "--chat-template"),
        (["up", "--prm-kind", "plus-minus", "--prm-url", "http://127.0.0.1:1"], "--prm-kind"),
        (["up", "--prm-chat"], "--prm-chat"),
        (["submit", "x", "--url", "http://127.0.0.1:1", "--chat-template", "/no/t.jinja"], "--chat-template"),
        (["submit", "x", "--url", "http://127.0.0.1:1", "--step-delimiter", "#" * 65], "--step-delimiter"),
        (
            ["up", "--engine", "sglang", "--engine-url", "http://a:1,http://b:2", "--generators", "3"],
            "--generators",
        ),
    ],
)
def test_bad_argument_is_one_line_naming_the_field(args, field, tmp_path):
    proc = (
        spex(*args, "--json", str(tmp_path / "r.json"), check=False)
        if args[0] == "bench"
        else spex(*args, check=False)
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_listings_print_profiles_and_knobs(capsys):
    assert main(["bench", "--list-profiles"]) == 0
    out = capsys.readouterr().out
    assert "Llemma-7B@A6000" in out and "Llemma-34B@A100-80GB" in out
    assert main(["bench", "--list-knobs"]) == 0
    assert "prm_noise" in capsys.readouterr().out


def test_profile_prints_the_step_curve(capsys):
    assert main(["profile", "--gpu", "H200", "--model", "Llama-2-7B", "--batches", "1,64"]) == 0
    out = capsys.readouterr().out
    assert "Llama-2-7B@H200" in out and "ctx 2048" in out


def _bench(tmp_path, name, *extra):
    path = tmp_path / name
    spex(
        "bench",
        "--algorithm",
        "rstar",
        "--target",
        "5",
        "--questions",
        "6",
        "--batch-size",
        "2",
        "--json",
        str(path),
        "--quiet",
        *extra,
    )
    return json.loads(path.read_text())


def test_same_arguments_same_results_file_apart_from_wall_clock(tmp_path):
    a = _bench(tmp_path, "a.json")
    b = _bench(tmp_path, "b.json")
    for field in WALL_CLOCK_FIELDS:
        a.pop(field), b.pop(field)
    run_a, run_b = a.pop("run"), b.pop("run")  # how each was made: the same but for --json
    assert run_a["settings"].pop("json") != run_b["settings"].pop("json")
    assert run_a["settings"] == run_b["settings"]
    assert a == b
    for field in (
        "throughput_qpm",
        "questions",
        "accuracy",
        "tokens_generated",
        "latency_p50_s",
        "latency_p99_s",
        "mean_batch",
        "utilization",
        "trees_digest",
    ):
        assert field in a


def test_different_seed_gives_different_trees_digest(tmp_path):
    assert (
        _bench(tmp_path, "a.json")["trees_digest"]
        != _bench(tmp_path, "b.json", "--seed", "1")["trees_digest"]
    )


def test_workload_file_is_read(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text("dfs_step_tokens_min = 20\ndfs_step_tokens_max = 20\n")
    res = _bench(tmp_path, "a.json", "--workload", str(f))
    assert res["knobs"]["dfs_step_tokens_max"] == 20
    assert res["tokens_generated"] == 20 * res["nodes_generated"]


def test_compare_mode_reports_speedup_and_costs_side_by_side(tmp_path):
    path = tmp_path / "c.json"
    spex(
        "bench",
        "--algorithm",
        "rstar",
        "--target",
        "5",
        "--questions",
        "4",
        "--batch-size",
        "2",
        "--mode",
        "compare",
        "--json",
        str(path),
        "--quiet",
    )
    res = json.loads(path.read_text())
    for field in (
        "speedup",
        "hit_rate",
        "consumption_rate",
        "tokens_wasted",
        "compute_amplification",
        "cancel_latency_p50_s",
        "primary_tpot_ms",
        "peak_kv_tokens",
        "latency_p50_s",
        "latency_p99_s",
        "latency_p50_s_baseline",
        "latency_p99_s_baseline",
    ):
        assert field in res
    assert res["lossless"] and res["speedup"] > 1.0
    assert res["baseline"]["mode"] == "baseline" and res["spex"]["mode"] == "spex"


@pytest.mark.parametrize(("flags", "expect"), [(["--no-t1"], (False, True)), (["--no-t2"], (True, False))])
def test_ablation_switches(tmp_path, flags, expect):
    path = tmp_path / "s.json"
    spex(
        "bench",
        "--algorithm",
        "rstar",
        "--target",
        "5",
        "--questions",
        "2",
        "--mode",
        "spex",
        "--json",
        str(path),
        "--quiet",
        *flags,
    )
    res = json.loads(path.read_text())
    assert (res["t1"], res["t2"]) == expect
    if not res["t1"]:
        assert res["spec_issued"] == 0


@pytest.mark.slow
def test_grid_runs_end_to_end(tmp_path):
    proc = spex("bench", "--grid", "--grid-questions", "2", "--grid-out", str(tmp_path), check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "grid.json").read_text())
    assert report["all_lossless"]
    assert (tmp_path / "grid_speedup.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("flags", "content"),
    [
        ([], "synthetic"),  # the simulated GPU writes the workload's tree
        (["--engine", "vllm", "--engine-url", "http://127.0.0.1:1"], "real"),  # a real model: its text
        (["--engine", "sglang", "--engine-url", "http://127.0.0.1:1"], "real"),
        (["--engine", "vllm", "--engine-url", "http://127.0.0.1:1", "--content", "synthetic"], "synthetic"),
        (["--content", "real", "--engine", "sim"], "real"),
    ],
)
def test_spex_up_runs_a_real_model_on_real_content_unless_told_otherwise(flags, content, monkeypatch):
    from spex.cli.main import build_parser
    from spex.cli.runtime import up_settings

    monkeypatch.delenv("SPEX_CONTENT", raising=False)
    monkeypatch.delenv("SPEX_ENGINE", raising=False)
    assert up_settings(build_parser().parse_args(["up", *flags])).content == content


def test_spex_up_takes_the_sampling_temperature_and_refuses_a_negative_one(monkeypatch):
    from spex.cli.main import build_parser
    from spex.cli.runtime import up_settings

    monkeypatch.delenv("SPEX_SAMPLING_TEMPERATURE", raising=False)
    greedy = up_settings(build_parser().parse_args(["up", "--sampling-temperature", "0"]))
    assert greedy.sampling_temperature == 0
    with pytest.raises(ValueError, match="SPEX_SAMPLING_TEMPERATURE"):
        up_settings(build_parser().parse_args(["up", "--sampling-temperature", "-1"]))


def test_repeated_pairs_on_the_simulator_and_the_results_table(tmp_path):
    """`--repeats` on the simulator: every pair the same figures (virtual time); the table reads them."""
    from spex.bench.table import table

    out = tmp_path / "r.json"
    spex("bench", "--algorithm", "rstar", "--target", "4", "--questions", "4", "--mode", "compare",
         "--repeats", "2", "--json", str(out), "--quiet")  # fmt: skip
    r = json.loads(out.read_text())
    assert [p["order"] for p in r["pairs"]] == ["baseline-first", "spex-first"]
    assert r["pairs"][0]["speedup"] == r["pairs"][1]["speedup"] == pytest.approx(r["speedup"])
    assert r["speedup_ci95"] == pytest.approx([r["speedup"]] * 2)  # no spread, no width
    assert r["pairs"][0]["spex"]["tpot_target"] == 0.05
    [_, _, row] = table([str(out)]).splitlines()
    assert f"| Llemma-7B@A6000 | rstar-4 | 1 | 4 | +5% | {r['speedup']:.2f} (" in row and "| yes |" in row


def test_the_oracle_bound_on_the_simulator_and_its_row_in_the_table(tmp_path):
    """`--mode compare --oracle`: SPEX speculates the baseline's final trees: every speculative
    job is used, nothing is wasted, the trees are the baseline's; the table marks the row."""
    from spex.bench.table import critical_path, table

    out = tmp_path / "r.json"
    spex("bench", "--algorithm", "rebase", "--target", "8", "--questions", "4", "--mode", "compare",
         "--oracle", "--repeats", "2", "--json", str(out), "--quiet")  # fmt: skip
    r = json.loads(out.read_text())
    assert r["trees_identical"] and r["lossless"] and r["speedup"] > 1
    for p in r["pairs"]:
        assert p["spex"]["predictor"] == "oracle" and p["hit_rate"] == 1.0
        assert p["compute_amplification"] == pytest.approx(1.0) and p["spex"]["spec_cancelled"] == 0
    [_, _, row] = table([str(out)]).splitlines()
    assert "| rebase-8 (oracle) | 1 | 4 |" in row
    # Where the searches waited, baseline → SPEX: the oracle's speculation shortens generation.
    [_, _, path] = critical_path([str(out)]).splitlines()
    base, best = (r["pairs"][-1][side]["critical_path_s_per_query"] for side in ("baseline", "spex"))
    assert f"| {base['generation_s']:.2f} → {best['generation_s']:.2f} |" in path
    assert best["generation_s"] < base["generation_s"] and "(oracle)" in path


def test_the_governors_trace_is_recorded_and_plotted(tmp_path):
    """Each SPEX run records worker 0's governor as it went (a row each time the slack or the
    pool moved); `python -m spex.bench.governor` summarizes and plots it."""
    out, png = tmp_path / "r.json", tmp_path / "g.png"
    spex("bench", "--algorithm", "rebase", "--target", "16", "--questions", "4", "--mode", "compare",
         "--tpot-target", "0.05", "--json", str(out), "--quiet")  # fmt: skip
    r = json.loads(out.read_text())
    trace = r["spex"]["governor_trace"]
    assert len(trace) > 1 and r["baseline"]["governor_trace"] == []
    times = [row[0] for row in trace]
    assert times == sorted(times) and all(-0.05 <= row[1] <= 4.0 and row[2] >= 0 for row in trace)
    assert trace[-1][1] == pytest.approx(r["spex"]["slack_end"][0], abs=1e-4)
    assert any(row[3] is not None for row in trace)  # windows closed, their growth measured
    assert {row[5] for row in trace} <= {"slack", "rate", "limit", "demand"}
    assert r["spex"]["objective"] == "slo"
    proc = subprocess.run(
        [sys.executable, "-m", "spex.bench.governor", str(out), "--plot", str(png)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("objective slo, bound by slack")
    assert "target +5%: window growth median" in proc.stdout
    assert png.stat().st_size > 0
