"""`spex.evaluate` on the in-process engine with a real (random-weight) model and reward model,
over a `datasets` split saved to disk: SPEX's trees are the baseline's (deterministic mode),
each question's tree is the one `spex bench --dataset FILE` grows for it, answers are graded
where a reference exists and left ungraded where none does, and the solution is the model's
own text."""

import json

import datasets
import pytest

import spex
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.sim.workload import WorkloadKnobs

pytest.importorskip("torch")

SHORT = {"max_step_tokens": 24, "params": {"max_depth": 3}}  # a random model never stops early


def test_a_comparison_on_a_real_model_is_lossless_and_bench_s_trees(tiny_model, tiny_prm, tmp_path):
    rows = spex.load_dataset("math500", limit=3)
    saved = [{"problem": q.text, "answer": q.reference} for q in rows[:2]] + [{"problem": rows[2].text}]
    datasets.Dataset.from_list(saved).save_to_disk(str(tmp_path / "split"))
    engine, reward = spex.Engine.hf(tiny_model, deterministic=True), spex.Reward.prm(tiny_prm)
    both = spex.evaluate(
        str(tmp_path / "split"), engine=engine, reward=reward, algorithm="rebase", target=4, mode="compare",
        progress=False, **SHORT,
    )  # fmt: skip
    assert both.lossless and both.trees_identical, both.max_reward_difference
    assert both.spex.content == "real" and both.spex.summary["spec_issued"] > 0
    results = both.baseline.results
    assert [r.correct for r in results[:2]] == [False, False] and results[2].correct is None  # random weights
    assert results[2].reference is None and both.baseline.accuracy == 0.0
    assert all(r.solution and r.solution[0] for r in results)  # the model's own text
    # The file spex bench reads gives the same trees (the third row has no answer: left out).
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in saved[:2]))
    bench = run_bench(
        BenchConfig(
            algorithm="rebase", target=4, questions=2, backend="hf", model=tiny_model, prm=tiny_prm,
            content="real", dataset=str(tmp_path / "q.jsonl"), deterministic=True,
            knobs=WorkloadKnobs(step_token_cap=24), params={"max_depth": 3},
        )
    )  # fmt: skip
    assert [r.digest for r in bench.records] == [r.tree_digest for r in results[:2]]
    assert [r.answer for r in bench.records] == [r.answer for r in results[:2]]


def test_the_logprob_reward_is_a_real_engine_s_default(tiny_model):
    run = spex.evaluate(
        ["What is 2 + 2?"],
        engine=spex.Engine.hf(tiny_model),
        algorithm="rstar",
        target=2,
        progress=False,
        **SHORT,
    )
    assert run.reward == "logprob" and run.summary["reward_profile"] is None
    assert run[0].correct is None and run.accuracy is None and run[0].nodes > 0
