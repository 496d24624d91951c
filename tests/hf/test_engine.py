"""The in-process PyTorch engine on a tiny random model: seeds, stops, aborts, priority, the
prefix cache, and the reward model."""

import pytest

from spex.proto.messages import PRIMARY, SPECULATIVE
from spex.shared.engine.api import UNTIL_STOP, EngineRequest
from spex.shared.hf.engine import HFConfig, HFEngine
from spex.shared.hf.reward import RewardConfig, RewardEngine
from tests.hf.engine_requests import drain, request


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_seed_gives_the_same_tokens_alone_and_in_a_batch_of_8(tiny_model, deterministic):
    cfg = HFConfig(deterministic=deterministic)
    alone = HFEngine.from_dir(tiny_model, cfg)
    alone.submit(request(alone, "r", seed=7), 0.0)
    (one,) = drain(alone)
    batched = HFEngine.from_dir(tiny_model, cfg)
    for i in range(8):  # batch mates: other questions, other seeds
        q = "What is $1+1$?" if i == 3 else f"Question {i}: what is {i}+{i}?"
        batched.submit(request(batched, f"r{i}", seed=7 if i == 3 else 100 + i, question=q), 0.0)
    done = {c.rid: c for c in drain(batched)}
    assert batched.stats.mean_batch > 4  # they really decoded together
    assert (done["r3"].text, done["r3"].generated) == (one.text, one.generated)
    assert one.generated == 24 and one.stop_reason == "length" and one.text


def test_a_stop_string_ends_the_step_before_it(tiny_model):
    engine = HFEngine.from_dir(tiny_model)
    engine.submit(request(engine, "free", seed=3, max_new=32), 0.0)
    (free,) = drain(engine)
    stop = free.text[len(free.text) // 2 : len(free.text) // 2 + 2]
    engine.submit(request(engine, "stopped", seed=3, max_new=32, stop=[stop]), 0.0)
    (stopped,) = drain(engine)
    assert stopped.stop_reason == "stop"
    assert stopped.text == free.text[: free.text.index(stop)] and stop not in stopped.text
    assert stopped.generated < free.generated


def test_an_abort_mid_generation_frees_its_slot(tiny_model):
    engine = HFEngine.from_dir(tiny_model)
    engine.submit(request(engine, "long", seed=1, max_new=200), 0.0)
    for _ in range(5):
        assert engine.step() == []
    assert engine.load().running == 1
    assert engine.abort("long", engine.clock_s) == []  # running: it leaves at the next step
    (c,) = engine.step()
    assert c.reason == "abort" and 0 < c.generated < 200
    assert engine.load().running == 0 and engine.next_event_s() is None
    assert engine.held_tokens == 0  # its prompt stays cached, unreferenced


def test_a_primary_behind_16_speculative_requests_finishes_first(tiny_model):
    engine = HFEngine.from_dir(tiny_model, HFConfig(max_running=8))
    for i in range(16):
        engine.submit(request(engine, f"s{i}", seed=i, priority=SPECULATIVE, max_new=48), 0.0)
    engine.step()  # eight speculative sequences are running
    engine.submit(request(engine, "p", seed=99, priority=PRIMARY, max_new=8), engine.clock_s)
    done = drain(engine)
    assert done[0].rid == "p"
    assert len(done) == 17 and all(c.reason == "finished" for c in done)


def test_a_child_reuses_its_parents_prompt_kv(tiny_model):
    engine = HFEngine.from_dir(tiny_model)
    engine.submit(request(engine, "parent", seed=1), 0.0)
    (parent,) = drain(engine)
    for i in range(2):  # two children: the parent's prompt plus the parent's step
        engine.submit(request(engine, f"child{i}", seed=10 + i, steps=[parent.text]), engine.clock_s)
    children = drain(engine)
    assert all(c.cached_tokens == parent.prompt_tokens for c in children[:1])
    assert children[1].cached_tokens == children[1].prompt_tokens  # the sibling computed it all
    assert engine.stats.cache_hit_rate > 0 and engine.load().prefix_cache_hit_rate > 0


def test_cached_pieces_give_the_same_tokens_as_fresh_ones(tiny_model):
    """Deterministic mode: whoever computed a prefix first, a request sees the same numbers."""
    cfg = HFConfig(deterministic=True)
    fresh = HFEngine.from_dir(tiny_model, cfg)
    fresh.submit(request(fresh, "c", seed=5, steps=["Add the two numbers."]), 0.0)
    (alone,) = drain(fresh)
    warm = HFEngine.from_dir(tiny_model, cfg)
    warm.submit(request(warm, "sibling", seed=6, steps=["Add the two numbers."]), 0.0)
    drain(warm)
    warm.submit(request(warm, "c", seed=5, steps=["Add the two numbers."]), warm.clock_s)
    (cached,) = drain(warm)
    assert cached.cached_tokens == cached.prompt_tokens > 0
    assert cached.text == alone.text


def test_the_reward_model_scores_paths_in_batches(tiny_model, tiny_prm):
    engine = RewardEngine.from_dir(tiny_prm, RewardConfig(max_batch=16))
    for i in range(16):
        req = request(engine, f"s{i}", seed=0, steps=[f"Step {j} of path {i}." for j in range(1 + i % 3)])
        engine.submit(EngineRequest(req.rid, req.prompt, req.rid + "/s", 0, text=req.text), 0.0)
    done = engine.step()
    assert len(done) == 16 and engine.stats.prefill_steps == 1  # one forward pass for all
    assert all(0.0 < c.reward < 1.0 for c in done)
    alone = RewardEngine.from_dir(tiny_prm, RewardConfig(deterministic=True))
    again = request(alone, "s5", seed=0, steps=[f"Step {j} of path 5." for j in range(3)])
    alone.submit(EngineRequest("s5", again.prompt, "s5/s", 0, text=again.text), 0.0)
    (one,) = drain(alone)
    assert one.reward == pytest.approx(next(c.reward for c in done if c.rid == "s5"), abs=1e-5)


class CharTokenizer:
    """One token per character: token i is chr(i)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


@pytest.mark.parametrize(
    ("min_tokens", "step"),
    [(0, "1. a"), (7, "1. a\n2. b"), (12, "1. a\n2. b\n3. c")],
)
def test_a_stop_string_ending_before_the_minimum_length_is_passed_over(min_tokens, step):
    """The numbered split's stop strings differ in length (`\\n2.`, `\\n10.`); a shorter one
    that ended within the minimum is not found one token later."""
    import torch

    from spex.shared.content.prompts import stop_strings
    from spex.shared.hf.sequence import Sequence

    engine = HFEngine.__new__(HFEngine)
    engine.tokenizer, engine._eos = CharTokenizer(), set()
    text = "1. a\n2. b\n3. c\n4. d"
    req = EngineRequest("r", (("q", 1),), "o", UNTIL_STOP, 64, 0, 0, 0.0, stop_strings("numbered"), ("q",))
    req.min_tokens = min_tokens
    s = Sequence(req, 1, 0.0, [(1,)])
    for ch in text:
        s.next_logits = torch.nn.functional.one_hot(torch.tensor(ord(ch)), 128).float()
        if not engine._sample([s]):
            break
    assert s.text == step and s.stop_reason == "stop"
