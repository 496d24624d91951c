"""`python -m spex.bench.simcheck REAL:SIM`: a measured cell beside the simulator's prediction
of the same trees, as a table and a plot; two runs of different trees are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from spex.bench.comparison import compare
from spex.bench.results import summarize, write_json
from spex.bench.simcheck import check, table
from spex.bench.vtime import BenchConfig, run_bench
from tests.serving.fake_vllm import ROOT


def compared(cfg: BenchConfig, path: Path) -> str:
    base, spex = summarize(run_bench(replace(cfg, mode="baseline"))), summarize(run_bench(cfg))
    write_json(compare(base, spex), str(path))
    return str(path)


def test_a_prediction_is_set_beside_the_measurement_of_the_same_trees(tmp_path):
    cfg = BenchConfig(algorithm="rstar", target=4, questions=3, reward="logprob", mode="spex")
    # Two clocks for the same trees: the catalog GPU and a faster one standing for "real".
    real = compared(replace(cfg, profile="Llemma-7B@A6000"), tmp_path / "real.json")
    sim = compared(replace(cfg, profile="Llemma-7B@H100"), tmp_path / "sim.json")
    c = check(f"{real}:{sim}")
    r, s = (json.loads(Path(p).read_text()) for p in (real, sim))
    text = table([c])
    assert f"| rstar-4 B=1 | {r['speedup']:.2f} (" in text and f"| {s['speedup']:.2f} |" in text
    # The error is the prediction's over the measurement, marked when past the 15% aim.
    error = s["speedup"] / r["speedup"] - 1
    assert f"| {error:+.0%}" in text and ("outside 15%" in text) == (abs(error) > 0.15)
    png = tmp_path / "check.png"
    proc = subprocess.run(
        [sys.executable, "-m", "spex.bench.simcheck", f"{real}:{sim}", "--plot", str(png)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert png.stat().st_size > 0 and "| rstar-4 B=1 |" in proc.stdout


def test_runs_of_different_trees_are_refused_in_one_line(tmp_path):
    cfg = BenchConfig(algorithm="rstar", target=4, questions=3, reward="logprob", mode="spex")
    a = compared(cfg, tmp_path / "a.json")
    b = compared(replace(cfg, seed=1), tmp_path / "b.json")
    proc = subprocess.run(
        [sys.executable, "-m", "spex.bench.simcheck", f"{a}:{b}"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "different trees" in proc.stderr
    # A prediction of a real-content cell from the workload's statistics: other trees, asked for.
    assert "| rstar-4 B=1 |" in table([check(f"{a}:{b}", same_trees=False)])
