"""`examples/offline_eval.py`, the guide's example, runs as a user runs it: on the simulated GPU
it compares the baseline and SPEX over the shipped easy set, prints each question and the
verdict, writes the results file, and is lossless; on a model in process it runs the model's
own text; a missing flag is one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "offline_eval.py"


def run(*args, cwd):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_the_example_compares_on_the_simulator(tmp_path):
    done = run("--engine", "sim", "--questions", "20", "--json", str(tmp_path / "eval.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("q000") and "same tree" in line for line in lines) == 20
    assert any("rebase-8 on sim" in line and "lossless: yes" in line for line in lines)
    written = json.loads((tmp_path / "eval.json").read_text())
    assert written["lossless"] and len(written["spex"]["questions"]) == 20
    assert written["spex"]["questions"][0]["query_id"] == "q00000"


def test_the_example_runs_a_model_in_process(tiny_model, tmp_path):
    pytest.importorskip("torch")
    done = run(
        "--engine", "hf", "--model", tiny_model, "--questions", "2", "--target", "2", "--max-depth", "2",
        "--max-step-tokens", "16", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "rebase-2 on hf" in done.stdout and "lossless: yes" in done.stdout  # deterministic mode


def test_a_missing_flag_is_one_line(tmp_path):
    done = run("--engine", "vllm", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == (
        "offline_eval.py: error: --url: the vllm engine needs the server's URL"
    )
