"""`spex.evaluate` against served engines over real HTTP: a generator speaking vLLM's API
(`tests/serving/fake_vllm.py`, a process of its own) and a reward model speaking vLLM's pooling
API (`tests/serving/fake_vllm_pooling.py`): every step is scored by the pooling server, the
comparison is lossless, and `spex bench --prm-engine vllm` grows the same trees."""

import asyncio
import contextlib
import json
import subprocess
import sys
import threading

import pytest

import spex
from spex.shared.core.ids import digest
from tests.serving.fake_vllm import ROOT, serving
from tests.serving.fake_vllm_pooling import fake_pooling

SEARCH = {"algorithm": "rebase", "target": 4, "params": {"max_depth": 3}}


@pytest.fixture(scope="module")
def generator():
    with serving("--max-num-seqs", "8", "--step-ms", "1") as url:
        yield url


@contextlib.contextmanager
def pooling():
    """The fake pooling server on a loop in a thread of its own (a run's engines have theirs)."""
    box = {}
    started = threading.Event()

    def serve():
        async def main():
            box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
            async with fake_pooling() as server:
                box["server"] = server
                started.set()
                await box["stop"].wait()

        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10), "the fake pooling server did not start"
    try:
        yield box["server"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)


def test_a_prm_served_by_vllm_scores_every_step_and_the_comparison_is_lossless(generator, tmp_path):
    questions = spex.load_dataset("easy", limit=2)
    with pooling() as prm:
        both = spex.evaluate(
            questions, engine=spex.Engine.vllm(generator), reward=spex.Reward.served(prm.url, server="vllm"),
            mode="compare", progress=False, **SEARCH,
        )  # fmt: skip
        scored = len(prm.bodies)
        bench_out = tmp_path / "bench.json"
        proc = subprocess.run(
            [
                sys.executable, "-m", "spex.cli", "bench", "--engine", "vllm", "--engine-url", generator,
                "--prm-url", prm.url, "--prm-engine", "vllm", "--dataset", "easy", "--questions", "2",
                "--algorithm", "rebase", "--target", "4", "--param", "max_depth=3", "--json", str(bench_out),
                "--quiet",
            ],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
    assert both.lossless and both.trees_identical, both.max_reward_difference
    nodes = sum(r.nodes for r in both.baseline) + sum(r.nodes for r in both.spex)
    assert scored >= nodes > 0  # every step of both runs scored there (and the start-up probe)
    assert both.spex.summary["reward_profile"] is not None and both.spex.reward == "prm"
    assert all(r.correct is not None for r in both.spex)  # easy's questions carry their answers
    assert proc.returncode == 0, proc.stderr
    bench = json.loads(bench_out.read_text())
    assert bench["trees_digest"] == digest(*(r.tree_digest for r in both.baseline))
    assert bench["answers"] == {r.query_id: r.answer for r in both.baseline}


def test_a_served_prm_without_vllm_s_pooling_runner_is_refused_in_one_line(generator):
    async def main():
        async with fake_pooling(pooling=False) as prm:
            return await asyncio.to_thread(
                spex.evaluate, ["What is 1 + 1?"], engine=spex.Engine.vllm(generator),
                reward=spex.Reward.served(prm.url, server="vllm"), progress=False, **SEARCH,
            )  # fmt: skip

    with pytest.raises(
        ValueError, match="prm_url: vllm at .*: no /pooling: serve the reward model with --runner pooling"
    ):
        asyncio.run(main())
