"""A small server speaking vLLM's OpenAI-compatible API (0.32) as SPEX speaks it, that decodes on
a schedule of its own: `python -m tests.serving.fake_vllm --port P`.

It batches as a serving engine does: up to `--max-num-seqs` sequences run, admitted by
priority (lower first) then arrival; each step gives every running sequence one token and
takes `--step-ms + --per-seq-ms × batch` (a decode step that grows with the batch, scaled
down). What a request generates is a function of its seed and prompt alone — batch-invariant,
like a deterministic engine — so SPEX must grow the baseline's very trees on it.

Endpoints: /health, /version, /v1/models, /v1/completions (`request_id`, `seed`, `priority`,
`max_tokens`, `min_tokens`, `ignore_eos`, `stop`, `logprobs`), /inference/v1/abort_requests
(`cmpl-<id>-0`), /metrics (running, waiting, KV usage, prefix-cache counters, cache config).
With `stop` strings a reply is a step of arithmetic, now and then ending in `\\boxed{}`; with
`ignore_eos` it is exactly `max_tokens` tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from spex.shared.runtime.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.32.0-fake"
MODEL = "fake-model"
BLOCK = 16  # tokens per KV block; prefix-cache hits come in whole blocks
KV_BLOCKS = 4096
STEPPER = web.AppKey("stepper", asyncio.Task)  # the engine's step loop, started with the app


def _draw(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=8).digest())


def _tokens(text: str) -> list[str]:
    """Four characters a token (what the fake's counts and cache are in)."""
    return [text[i : i + 4] for i in range(0, len(text), 4)]


@dataclass(eq=False)
class _Seq:
    rid: str
    priority: int
    arrival: int
    out: list[str]  # the tokens it will generate, decided when it arrives
    logprobs: list[float]
    finish: str
    stop_reason: str | None
    prompt_tokens: int
    cached_tokens: int
    done: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    made: int = 0


class FakeVLLM:
    def __init__(
        self,
        max_num_seqs: int,
        step_ms: float,
        per_seq_ms: float,
        fail_after: int = 0,
        request_ms: float = 0.0,
        prefill_ms_per_token: float = 0.0,
        first_answer_at: int = 0,
    ) -> None:
        self.max_num_seqs, self.step_s, self.per_seq_s = max_num_seqs, step_ms / 1e3, per_seq_ms / 1e3
        # What the step that admits a request adds: a fixed cost, and its uncached prompt's prefill.
        self.request_s, self.prefill_s_per_token = request_ms / 1e3, prefill_ms_per_token / 1e3
        self.fail_after = fail_after  # > 0: every completion request after this many fails (a 500)
        self.first_answer_at = first_answer_at  # no answer from a prompt of fewer steps than this
        self.served = 0
        self.waiting: list[_Seq] = []
        self.running: list[_Seq] = []
        self.by_rid: dict[str, _Seq] = {}
        self.arrivals = itertools.count()
        self.wake = asyncio.Event()
        self.cached_blocks: set[str] = set()  # prompt prefixes, a block at a time
        self.queries = self.hits = 0
        self.bodies: list[dict[str, Any]] = []  # every completion request as sent (read in process)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/inference/v1/abort_requests", self.abort)
        app.router.add_get("/metrics", self.metrics)
        app.on_startup.append(self._start)
        return app

    async def _start(self, app: web.Application) -> None:
        app[STEPPER] = asyncio.create_task(self._step_forever())

    async def health(self, _: web.Request) -> web.Response:
        return web.Response()

    async def version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": MODEL}]})

    # ------------------------------------------------------------------ the engine
    async def _step_forever(self) -> None:
        while True:
            self.waiting.sort(key=lambda s: (s.priority, s.arrival))
            admit_s = 0.0
            while self.waiting and len(self.running) < self.max_num_seqs:
                seq = self.waiting.pop(0)
                admit_s += self.request_s + self.prefill_s_per_token * (seq.prompt_tokens - seq.cached_tokens)
                self.running.append(seq)
            if not self.running:
                self.wake.clear()
                await self.wake.wait()
                continue
            await asyncio.sleep(self.step_s + self.per_seq_s * len(self.running) + admit_s)
            for seq in list(self.running):
                seq.made += 1
                if seq.made >= len(seq.out):
                    self._end(seq, seq.finish)

    def _end(self, seq: _Seq, finish: str) -> None:
        for queue in (self.running, self.waiting):
            if seq in queue:
                queue.remove(seq)
        self.by_rid.pop(seq.rid, None)
        if not seq.done.done():
            seq.done.set_result(finish)

    # ------------------------------------------------------------------ the API
    async def completions(self, req: web.Request) -> web.Response:
        body = await req.json()
        self.bodies.append(body)
        prompt, rid = str(body["prompt"]), str(body.get("request_id") or next(self.arrivals))
        self.served += 1
        if self.fail_after and self.served > self.fail_after:
            return web.json_response({"error": "engine dead"}, status=500)
        if body.get("priority", 0) and body["priority"] < 0:
            return web.json_response({"error": "priority must be at least 0"}, status=400)
        seq = self._sequence(rid, prompt, body)
        self.by_rid[rid] = seq
        self.waiting.append(seq)
        self.wake.set()
        finish = await seq.done
        n = seq.made if finish == "abort" else len(seq.out)
        choice = {
            "index": 0,
            "text": "".join(seq.out[:n]),
            "logprobs": {"token_logprobs": seq.logprobs[:n], "tokens": seq.out[:n]},
            "finish_reason": finish,
            "stop_reason": seq.stop_reason if finish == "stop" else None,
        }
        usage = {
            "prompt_tokens": seq.prompt_tokens,
            "completion_tokens": n,
            "prompt_tokens_details": {"cached_tokens": seq.cached_tokens},
        }
        return web.json_response({"id": f"cmpl-{rid}-0", "model": MODEL, "choices": [choice], "usage": usage})

    def _sequence(self, rid: str, prompt: str, body: dict[str, Any]) -> _Seq:
        seed, limit = int(body.get("seed") or 0), int(body.get("max_tokens") or 16)
        stop = list(body.get("stop") or [])
        if body.get("ignore_eos") or not stop:  # exactly max_tokens (the synthetic content mode)
            out, finish, stop_reason = ["ab. "] * limit, "length", None
        else:  # a step of arithmetic, now and then the answer (the stop string is not returned)
            a, b, r = _draw(seed, prompt, "a") % 50, _draw(seed, prompt, "b") % 50, _draw(seed, prompt, "r")
            text = f"{a} + {b} = {a + b}."
            steps = prompt.count(stop[0])
            if steps >= self.first_answer_at and (r % 3 == 0 or steps >= 4):
                text += f" The answer is \\boxed{{{a + b}}}."
            out, finish, stop_reason = _tokens(text), "stop", stop[0]
            if len(out) > limit:
                out, finish, stop_reason = out[:limit], "length", None
        logprobs = [-((_draw(seed, prompt, i) % 1000) / 1000.0) for i in range(len(out))]
        tokens = _tokens(prompt)
        cached = 0
        salt = str(body.get("cache_salt") or "")  # a salted request shares only its salt's cache
        for k in range(BLOCK, len(tokens) + 1, BLOCK):
            block = salt + "\x00" + "".join(tokens[:k])
            if block in self.cached_blocks:
                cached = k
            self.cached_blocks.add(block)
        self.queries += len(tokens)
        self.hits += cached
        return _Seq(rid, int(body.get("priority", 0)), next(self.arrivals), out, logprobs, finish,
                    stop_reason, len(tokens), cached)  # fmt: skip

    async def abort(self, req: web.Request) -> web.Response:
        for server_id in (await req.json()).get("request_ids", []):
            rid = str(server_id).removeprefix("cmpl-").removesuffix("-0")
            seq = self.by_rid.get(rid)
            if seq is not None:
                self._end(seq, "abort")
        return web.json_response({})

    async def metrics(self, _: web.Request) -> web.Response:
        held = sum(s.prompt_tokens + s.made for s in self.running)
        lines = [
            f'vllm:cache_config_info{{block_size="{BLOCK}",num_gpu_blocks="{KV_BLOCKS}",'
            'enable_prefix_caching="True"} 1.0',
            f"vllm:num_requests_running {len(self.running)}",
            f"vllm:num_requests_waiting {len(self.waiting)}",
            f"vllm:kv_cache_usage_perc {held / (BLOCK * KV_BLOCKS):.6f}",
            f"vllm:prefix_cache_queries_total {self.queries}",
            f"vllm:prefix_cache_hits_total {self.hits}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


@contextlib.asynccontextmanager
async def in_process(**options: Any) -> AsyncIterator[tuple[str, FakeVLLM]]:
    """The server in the test's own event loop (its requests readable in `bodies`): (URL, server)."""
    fake = FakeVLLM(**{"max_num_seqs": 8, "step_ms": 1.0, "per_seq_ms": 0.0, **options})
    port, app = free_port(), fake.app()
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", fake
    finally:
        await runner.cleanup()
        app[STEPPER].cancel()
        await asyncio.gather(app[STEPPER], return_exceptions=True)


@contextlib.contextmanager
def serving(*flags: str) -> Iterator[str]:
    """The server as a process of its own on a free port, until the block ends: its URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "tests.serving.fake_vllm", "--port", str(port), *flags]
    url = f"http://127.0.0.1:{port}"
    # Its output goes to a file, read only if it fails to start (a pipe nobody reads fills up).
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(url, proc, log)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return
        except OSError:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"the fake vLLM server exited: {log.read().decode()[-2000:]}") from None
            assert time.monotonic() < deadline, "the fake vLLM server did not come up"
            time.sleep(0.1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--step-ms", type=float, default=4.0)
    p.add_argument("--per-seq-ms", type=float, default=0.25)
    p.add_argument("--fail-after", type=int, default=0, help="fail every completion after this many")
    p.add_argument("--request-ms", type=float, default=0.0, help="what admitting a request adds to its step")
    p.add_argument("--prefill-ms-per-token", type=float, default=0.0, help="and each uncached prompt token")
    args = p.parse_args()
    server = FakeVLLM(
        args.max_num_seqs,
        args.step_ms,
        args.per_seq_ms,
        args.fail_after,
        args.request_ms,
        args.prefill_ms_per_token,
    )
    web.run_app(server.app(), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
