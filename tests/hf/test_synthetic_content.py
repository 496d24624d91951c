"""The synthetic content mode on a real engine: the engine generates exactly the workload's
number of tokens, so the search grows the simulator's tree — timed on real hardware."""

from dataclasses import replace

import pytest

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.sim.workload import WorkloadKnobs


@pytest.mark.parametrize(("algorithm", "target"), [("rebase", 4), ("rstar", 4)])
def test_a_real_engine_grows_the_simulators_tree(tiny_model, tiny_prm, algorithm, target):
    cfg = BenchConfig(
        algorithm=algorithm, target=target, questions=2, knobs=replace(WorkloadKnobs(), step_token_cap=24)
    )
    sim = summarize(run_bench(cfg))
    real = summarize(run_bench(replace(cfg, backend="hf", model=tiny_model, prm=tiny_prm, mode="spex")))
    assert real.trees_digest == sim.trees_digest and real.answers == sim.answers
    assert real.tokens_generated == sim.tokens_generated
    assert real.spec_issued > 0 and real.makespan_s > 0  # measured engine time, not simulated


def test_a_real_engines_synthetic_prompts_have_the_workloads_token_counts(tiny_model):
    """The head and every step piece reach the tokens the simulator counts for them (a token
    or two over at most), so a real engine prefills and caches what the simulator does."""
    from spex.bench.vtime.content import SizedPrompt
    from spex.shared.content.prompts import chat_template
    from spex.shared.hf.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    sized = SizedPrompt(chat_template(tokenizer), "newline", count)
    prompt = (("q", 140), ("a", 7), ("b", 30))
    steps = ["Step 1: assume approach 0 of root. The answer is 16", "Step 2: short"]
    pieces = sized.pieces("Synthetic problem q00000 (world seed 0)", steps, prompt)
    assert [count(p) for p in pieces] == pytest.approx([140, 7, 30], abs=2)
    assert all(count(p) >= n for p, (_, n) in zip(pieces, prompt, strict=True))
    assert "Synthetic problem q00000" in pieces[0] and pieces[1].startswith("Step 1:")
    # Without a token count (a server without --model) the texts go as they are.
    plain = SizedPrompt(chat_template(tokenizer), "newline", None).pieces("Q", steps, prompt)
    assert plain[1] == steps[0] + "\n"
