"""The reward model scores the jobs it has in hand in one padded pass: each row's score equals
the same path scored alone to float rounding (float32: 1e-5), a pass keeps to its row and
token budgets, and the scorer service hands a read's jobs to the engine together."""

import asyncio

import pytest

from spex.proto import ScoreRequest, ScoreResult, decode, encode
from spex.proto.messages import PRIMARY, SPECULATIVE
from spex.proto.names import SCORE_JOBS, SINGLE, query_inbox
from spex.shared.engine.api import EngineRequest
from spex.shared.hf.reward import RewardConfig, RewardEngine
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.settings import Settings
from tests.hf.engine_requests import request
from tests.services.helpers import known_query

TOLERANCE = 1e-5  # float32 P(right): the batched pass against the row alone


def score_request(engine, rid, steps, priority=PRIMARY):
    req = request(engine, rid, seed=0, steps=steps, priority=priority)
    return EngineRequest(rid, req.prompt, rid + "/s", 0, priority=priority, text=req.text)


def paths(n):
    """Paths of 1 to 5 steps of different lengths: rows padded differently in one pass."""
    return {
        f"s{i}": [f"Step {j}: {'add ' * (i + j)}the numbers of path {i}." for j in range(1 + i % 5)]
        for i in range(n)
    }


def test_each_row_of_a_batched_pass_scores_as_the_path_alone(tiny_prm):
    batched = RewardEngine.from_dir(tiny_prm, RewardConfig(max_batch=16))
    for rid, steps in paths(12).items():
        batched.submit(score_request(batched, rid, steps), 0.0)
    together = {c.rid: c.reward for c in batched.step()}
    assert len(together) == 12 and batched.stats.prefill_steps == 1
    alone = RewardEngine.from_dir(tiny_prm, RewardConfig(deterministic=True))
    for rid, steps in paths(12).items():
        alone.submit(score_request(alone, rid, steps), 0.0)
        (c,) = alone.step()
        assert c.reward == pytest.approx(together[rid], abs=TOLERANCE), rid


BUDGET = 800  # padded tokens a pass may hold: three or so of these paths (100-250 tokens each)


def test_a_pass_keeps_to_its_token_budget_most_urgent_first(tiny_prm):
    engine = RewardEngine.from_dir(tiny_prm, RewardConfig(max_batch=16, max_batch_tokens=BUDGET))
    engine.trace = []
    for rid, steps in paths(10).items():
        engine.submit(score_request(engine, rid, steps, SPECULATIVE if rid != "s9" else PRIMARY), 0.0)
    widths = {rid: len(s.ids) for rid, s in engine._by_rid.items()}
    first = [c.rid for c in engine.step()]
    assert first[0] == "s9"  # the primary before the speculative ones
    assert max(widths[r] for r in first) * len(first) <= BUDGET and 1 < len(first) < 10
    while engine.waiting:
        engine.step()
    assert sum(rows for _, _, rows in engine.trace) == 10 and len(engine.trace) > 1


def test_a_path_longer_than_the_budget_still_gets_its_pass(tiny_prm):
    engine = RewardEngine.from_dir(tiny_prm, RewardConfig(max_batch_tokens=4))
    engine.submit(score_request(engine, "long", ["A long step. " * 20]), 0.0)
    (c,) = engine.step()
    assert c.rid == "long" and 0.0 < c.reward < 1.0


def score_in_process(redis_url, prm, jobs):
    """Run the scorer service in process over `jobs` (all in the stream before it reads):
    the results, and its reward engine (its passes traced)."""
    from spex.services.scorer import Scorer

    async def go():
        settings = Settings(redis_url=redis_url, consumer="scorer-t", prm=prm)
        r = redis_client(settings)
        await known_query(r)
        for job in jobs:
            await r.xadd(SCORE_JOBS, {"e": encode(job)})
        scorer = Scorer(r, settings)
        scorer.engine.engine.trace = []  # the threaded engine's reward engine: its passes
        stop = asyncio.Event()
        task = asyncio.create_task(scorer.run(stop))
        try:
            for _ in range(600):
                entries = await r.xrange(query_inbox("q", SINGLE))
                if len(entries) >= len(jobs):
                    break
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await task
            await r.aclose()
        return [decode(query_inbox("q", SINGLE), e[b"e"]) for _, e in entries], scorer.engine.engine

    return asyncio.run(go())


def score_job(i, tokens):
    return ScoreRequest(
        msg_id=f"m{i}", query_id="q", job_id=f"j{i}", node_id=f"n{i}", question="What is 1+1?",
        steps=[f"Step {i}: add {i} and {i}."], prompt_node_ids=["root", f"n{i}"], prompt_tokens=tokens,
    )  # fmt: skip


def test_the_scorer_hands_a_reads_jobs_to_its_reward_model_in_one_pass(redis_url, tiny_prm):
    results, engine = score_in_process(redis_url, tiny_prm, [score_job(i, [8, 6]) for i in range(6)])
    assert sorted(r.job_id for r in results if isinstance(r, ScoreResult)) == [f"j{i}" for i in range(6)]
    assert [rows for _, _, rows in engine.trace] == [6]  # one pass for the read's six jobs (before: [1, 5])


def test_the_scorer_sizes_a_synthetic_path_to_the_workloads_token_counts(redis_url, tiny_prm):
    # The head (the template's instruction and example, then the question) longer than the
    # template alone; each piece the fewest words that reach its count: a token or two over.
    _, engine = score_in_process(redis_url, tiny_prm, [score_job(i, [300, 40]) for i in range(3)])
    assert 3 * 340 <= engine.stats.prompt_tokens <= 3 * 346  # (before: the texts as they are)


def test_a_catalog_shapes_reward_model_builds_its_weights_where_it_loads(tmp_path):
    from spex.shared.hf.models import ModelSpec, init_model
    from spex.shared.hf.shapes import SHAPES

    out = init_model(ModelSpec(shape=SHAPES["Llemma-7B"].tiny(), prm=True, seed=3), tmp_path / "prm")
    assert not list(out.glob("*.safetensors"))  # a config and a tokenizer only
    engine = RewardEngine.from_dir(out)
    assert type(engine.model).__name__ == "LlamaForTokenClassification"
    engine.submit(score_request(engine, "a", ["Step 1: add."]), 0.0)
    again = RewardEngine.from_dir(out)  # the same seed: the same weights, the same score
    again.submit(score_request(again, "a", ["Step 1: add."]), 0.0)
    assert engine.step()[0].reward == again.step()[0].reward
