"""Checks of the engine's Llama forward pass on any model: a sequence's logits bit-identical
alone and in any batch, and agreement with transformers' own forward pass."""

import torch

from spex.shared.hf.llama import LlamaRunner

PROMPTS = [
    "Sam has 4 apples and buys 3 more. How many apples does Sam have now?",
    "What is 12 times 3?",
    "A train leaves at noon and travels for 2 hours at 60 miles per hour. How far does it go?",
    "Add 5 and 9.",
    "Solve for x: 2x + 6 = 10.",
    "What is the sum of the first ten positive integers?",
]


def ids(tokenizer, text):
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def decode_steps(runner, prompts, steps):
    """Prefill each prompt in two pieces, then decode `steps` greedy tokens for all in one
    batch: per prompt, the logits of every step."""
    seqs, nexts, out = [], [], [[] for _ in prompts]
    for p in prompts:
        head = runner.new_segment(3)
        runner.prefill([head], p[:3])
        piece = runner.new_segment(len(p) - 3)
        logits = runner.prefill([head, piece], p[3:])
        seqs.append([head, piece, runner.new_segment(2)])  # grown as it fills
        nexts.append(int(logits.argmax()))
    for _ in range(steps):
        logits = runner.decode(seqs, nexts)
        for b in range(len(prompts)):
            out[b].append(logits[b])
        nexts = [int(row.argmax()) for row in logits]
    return out


def check_invariant(model, tokenizer, steps, mates=(1, 2, 3, 5), deterministic=True):
    """A prompt's logits over `steps` decode steps are bit-identical alone and in batches with
    each count of `mates`, the prompt first and last."""
    prompts = [ids(tokenizer, p) for p in PROMPTS]
    runner = LlamaRunner(model, deterministic=deterministic, max_rows=16)
    with torch.inference_mode():
        (alone,) = decode_steps(runner, prompts[:1], steps)
        for n in mates:  # batches of 2 to 6 rows, the request first and last
            for batch in (prompts[: n + 1], [*prompts[1 : n + 1], prompts[0]]):
                got = decode_steps(runner, batch, steps)[batch.index(prompts[0])]
                assert all(torch.equal(a, b) for a, b in zip(alone, got, strict=True)), (
                    len(batch),
                    runner.rows,
                )


def check_agrees_with_transformers(model, tokenizer):
    """The runner's logits of a prefill in two pieces and a decode step agree with
    transformers' forward pass over the same tokens."""
    runner = LlamaRunner(model)
    prompt = ids(tokenizer, PROMPTS[2])
    with torch.inference_mode():
        own = runner.new_segment(4)  # one segment, grown as it fills
        runner.prefill([own], prompt[:5])
        last = runner.prefill([own], prompt[5:])
        token = int(last.argmax())
        (step,) = runner.decode([[own]], [token])
        ref = model(input_ids=torch.tensor([[*prompt, token]])).logits[0].float()
    assert own.length == len(prompt) + 1
    assert torch.allclose(last, ref[len(prompt) - 1], atol=2e-4)
    assert torch.allclose(step, ref[-1], atol=2e-4)
