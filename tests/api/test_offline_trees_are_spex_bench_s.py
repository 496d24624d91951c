"""`spex.evaluate` on the simulated GPU grows, for a seed, the trees `spex bench` grows: the same
answers and digests question by question, the same figures, and in a comparison the same
lossless verdict and speedup (virtual time is deterministic). `spex bench` runs as a user runs
it, a process of its own."""

import json
import subprocess
import sys

import pytest

import spex
from spex.bench.results import WALL_CLOCK_FIELDS
from spex.shared.core.ids import digest


def bench(tmp_path, *args):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "spex.cli", "bench", *args, "--json", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def figures(summary):
    """A run's figures less what the wall clock decides (and the file's note of how it was made)."""
    return {k: v for k, v in summary.items() if k not in (*WALL_CLOCK_FIELDS, "run")}


@pytest.mark.parametrize(("algorithm", "target", "mode"), [("rebase", 8, "spex"), ("rstar", 5, "baseline")])
def test_a_run_is_spex_bench_s_run_question_by_question(tmp_path, algorithm, target, mode):
    args = ["--algorithm", algorithm, "--target", str(target), "--questions", "5", "--seed", "7"]
    expected = bench(tmp_path, *args, "--batch-size", "2", "--mode", mode)
    got = spex.evaluate(
        questions=5, algorithm=algorithm, target=target, seed=7, batch_size=2, mode=mode, progress=False
    )
    assert [r.query_id for r in got] == [f"q{i:05d}" for i in range(5)]
    assert {r.query_id: r.answer for r in got} == expected["answers"]
    assert digest(*(r.tree_digest for r in got)) == expected["trees_digest"]
    assert figures(got.summary) == figures(expected)
    assert got.accuracy == expected["accuracy"] and got.throughput_qpm == expected["throughput_qpm"]
    assert all(r.solution and r.nodes > 0 and r.tokens > 0 for r in got)
    assert sum(r.speculative_issued for r in got) == expected["spec_issued"]
    assert (expected["spec_issued"] > 0) == (mode == "spex")


def test_a_comparison_is_spex_bench_s_compare_with_its_lossless_verdict(tmp_path):
    expected = bench(
        tmp_path, "--algorithm", "rebase", "--target", "8", "--questions", "4", "--mode", "compare"
    )
    got = spex.evaluate(questions=4, algorithm="rebase", target=8, mode="compare", progress=False)
    assert got.lossless and got.trees_identical and got.same_answers
    assert expected["lossless"] and got.speedup == expected["speedup"] > 1.0
    assert got.spex.hit_rate == expected["hit_rate"] and got.spex.hit_rate > 0
    assert figures(got.summary["spex"]) == figures(expected["spex"])
    assert figures(got.summary["baseline"]) == figures(expected["baseline"])
    rows = got.to_records()
    assert [row["same_tree"] for row in rows] == [True] * 4
    assert [row["answer_spex"] for row in rows] == list(expected["spex"]["answers"].values())


def test_a_dataset_on_the_simulator_runs_the_workload_s_questions_of_its_ids():
    """The sim engine reads no text (as the pipeline's synthetic steps do not): a dataset's
    question q00002 searches the synthetic question q00002's tree, in any slice of it."""
    data = spex.load_dataset("easy", limit=6)
    whole = spex.evaluate(data, algorithm="rstar", target=4, progress=False)
    part = spex.evaluate(data[2:4], algorithm="rstar", target=4, progress=False)
    plain = spex.evaluate(questions=6, algorithm="rstar", target=4, progress=False)
    assert [r.tree_digest for r in whole] == [r.tree_digest for r in plain]
    assert [(r.query_id, r.tree_digest) for r in part] == [(r.query_id, r.tree_digest) for r in whole[2:4]]
    first = whole[0]
    assert first.question == data[0].text  # the text is shown, the workload's answer graded
    assert first.reference == plain[0].reference != data[0].reference
    assert whole.content == "synthetic" and first.correct == (first.answer == first.reference)
