"""The in-process engine's prompt planner on its own, over a prefix cache and a forward pass
and no engine: a prompt's pieces are placed once and found by the next prompt that starts with
them; a pass takes at most `prefill_tokens` prompt rows, primaries' first, a piece split over
passes; the logits of a completed prompt make its sequence ready to decode."""

import torch

from spex.proto.messages import PRIMARY, SPECULATIVE
from spex.shared.engine.api import UNTIL_STOP, EngineRequest
from spex.shared.hf.kvcache import PrefixCache
from spex.shared.hf.llama import LlamaRunner
from spex.shared.hf.models import load_lm, load_tokenizer
from spex.shared.hf.passes import PromptPlanner
from spex.shared.hf.sequence import Sequence


def _sequence(planner, seq, pieces, priority):
    req = EngineRequest(f"r{seq}", (), f"r{seq}", UNTIL_STOP, 4, priority, seq, 1.0, (), tuple(pieces))
    return Sequence(req, seq, 0.0, [planner.ids(p) for p in pieces])


def test_prompts_are_placed_once_and_passes_take_primaries_first(tiny_model, monkeypatch):
    monkeypatch.setenv("SPEX_KERNELS", "torch")
    model = load_lm(tiny_model, "cpu", None)
    runner = LlamaRunner(model, False, max_rows=24, max_logits=8, kv_tokens=4096)
    tokenizer = load_tokenizer(tiny_model)
    planner = PromptPlanner(tokenizer, PrefixCache(), runner, prefill_tokens=16, max_running=4)
    question = "What is the sum of one and two, written as a number?"
    spec = _sequence(planner, 0, [question, " First I add them."], SPECULATIVE)
    primary = _sequence(planner, 1, [question, " Then I write it."], PRIMARY)
    planner.place(spec, planner.found(spec))
    found = planner.found(primary)
    assert found == spec.entries[:1]  # the shared question is found, its computation pending
    planner.cache.lock(found)
    planner.place(primary, found)
    assert primary.cached_tokens == len(primary.pieces[0]) and len(planner.pending) == 3
    running = [spec, primary]
    rows = []
    with torch.inference_mode():
        while not all(s.prefilled for s in running):
            batch, logits_of, primary_rows = planner.plan([], running)
            assert 0 < batch.rows <= 16
            rows.append((batch.rows, len(primary_rows)))
            planner.absorb(runner.forward(batch, [row for row, _ in logits_of]), logits_of, running)
    assert not planner.pending and all(s.next_logits is not None for s in running)
    # The question (the primary's first piece, and the speculative one's) goes first, then the
    # primary's own piece, and only then the speculative sequence's.
    assert rows[0][1] == rows[0][0]
    assert sum(r for r, _ in rows) == sum(len(p) for p in spec.pieces) + len(primary.pieces[1])
