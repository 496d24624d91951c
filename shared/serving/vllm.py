"""vLLM's OpenAI-compatible server (`python -m vllm.entrypoints.openai.api_server`).

What a SPEX generator needs of the server, and the flags that give it:
- `--scheduling-policy priority`: primaries (priority 0) before speculative jobs (lower runs
  first, as SPEX numbers them);
- `--enable-prefix-caching`: a child's prompt reuses its parent's KV;
- `--enable-scale-out`: the abort endpoint `/inference/v1/abort_requests`, which takes the
  server's id of a completion, `cmpl-<request_id>-0`;
- `--enable-prompt-tokens-details`: cached prompt tokens in each reply's usage.
`check` reads the served model and refuses to start when priority scheduling is off (every
request would then fail on the server) or the abort endpoint is missing.

A request is `/v1/completions` with `request_id`, `seed`, `priority`, `stop`, `logprobs: 0`
(the sampled token's log-probability, for the logprob reward) and, for synthetic content,
`ignore_eos` with exactly the step's tokens.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from spex.shared.engine.api import UNTIL_STOP, EngineRequest
from spex.shared.serving.backend import (
    EngineMisconfigured,
    EngineUnavailable,
    Reply,
    ServerMetrics,
    metric_sum,
    parse_prometheus,
    read_finish,
)

__all__ = ["VLLMBackend"]

ABORT_PATH = "/inference/v1/abort_requests"


class VLLMBackend:
    name = "vllm"

    def __init__(self, url: str, model: str = "") -> None:
        self.url = url.rstrip("/")
        self.model = model  # the served model's name; read from /v1/models when empty
        self.kv_capacity = 0
        self.server_info: dict[str, object] = {}  # what the server says of itself (by `check`)
        # A prefix-cache namespace of one's own: requests with another salt (or none) share
        # no cached prefix with these (a benchmark's runs, each on a cold cache).
        self.cache_salt: str | None = None
        self._cache_config: dict[str, str] = {}  # vllm:cache_config_info's labels

    async def served(self, session: aiohttp.ClientSession) -> str | None:
        """Read the served model's name into `model` (checking the one asked for, if any); the
        server's version, if it says."""
        async with session.get(self.url + "/v1/models") as resp:
            if resp.status != 200:
                raise EngineUnavailable(f"vllm at {self.url}: /v1/models answered {resp.status}")
            served = [m["id"] for m in (await resp.json()).get("data", [])]
        if not served:
            raise EngineMisconfigured(f"vllm at {self.url}: serves no model")
        if self.model and self.model not in served:
            raise EngineMisconfigured(f"vllm at {self.url}: serves {served}, not {self.model!r}")
        self.model = self.model or served[0]
        async with session.get(self.url + "/version") as resp:
            version = (await resp.json(content_type=None)).get("version") if resp.status == 200 else None
        return str(version) if version is not None else None

    async def check(self, session: aiohttp.ClientSession) -> None:
        version = await self.served(session)
        # A priority other than 0 is an error unless the server schedules by priority.
        probe = {"model": self.model, "prompt": "1", "max_tokens": 1, "priority": 1}
        async with session.post(self.url + "/v1/completions", json=probe) as resp:
            text = (await resp.text())[:200]  # read to the end: the connection goes back to the pool
            if resp.status != 200:
                raise EngineMisconfigured(
                    f"vllm at {self.url}: start it with --scheduling-policy priority ({resp.status}: {text})"
                )
        async with session.post(self.url + ABORT_PATH, json={"request_ids": ["cmpl-spex-probe-0"]}) as resp:
            await resp.read()
            if resp.status == 404:
                raise EngineMisconfigured(
                    f"vllm at {self.url}: start it with --enable-scale-out (abort endpoint)"
                )
        metrics = await self.metrics(session)
        if "vllm:prefix_cache_queries_total" not in metrics.raw:
            raise EngineMisconfigured(f"vllm at {self.url}: /metrics has no prefix-cache counters")
        # The flags a server shows: its cache configuration (/metrics) and what SPEX checked.
        self.server_info = {
            "engine": "vllm",
            "version": version,
            "model": self.model,
            "scheduling_policy": "priority",
            "abort_endpoint": ABORT_PATH,
            **self._cache_config,
        }

    def generate(self, req: EngineRequest, rid: str) -> tuple[str, dict[str, object]]:
        body: dict[str, object] = {
            "model": self.model,
            "prompt": "".join(req.text),
            "request_id": rid,
            "seed": req.seed,
            "priority": req.priority,
            "temperature": req.temperature,
            "logprobs": 0,
        }
        if self.cache_salt:
            body["cache_salt"] = self.cache_salt
        if req.output_tokens == UNTIL_STOP:  # the model's own step, up to a stop string
            body |= {"max_tokens": req.max_new_tokens, "stop": list(req.stop)}
            if req.min_tokens:  # vLLM holds back EOS too until then (the HF engine does not)
                body["min_tokens"] = req.min_tokens
        else:  # exactly this many tokens (the synthetic content mode)
            body |= {"max_tokens": req.output_tokens, "min_tokens": req.output_tokens, "ignore_eos": True}
        return "/v1/completions", body

    def read(self, req: EngineRequest, body: Any) -> Reply:
        choice = body["choices"][0]
        usage = body.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        lp = (choice.get("logprobs") or {}).get("token_logprobs") or []
        finish = choice.get("finish_reason") or "stop"
        if finish == "stop" and choice.get("stop_reason") is None:
            finish = "eos"  # no stop string matched: the model ended it
        return Reply(
            text=choice.get("text") or "",
            generated=int(usage.get("completion_tokens") or len(lp)),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0),
            finish=read_finish(finish),
            logprobs=tuple(float(x) for x in lp if x is not None),
        )

    def abort(self, rid: str) -> tuple[str, dict[str, object]]:
        return ABORT_PATH, {"request_ids": [f"cmpl-{rid}-0"]}

    async def metrics(self, session: aiohttp.ClientSession) -> ServerMetrics:
        async with session.get(self.url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            text = await resp.text()
        m = parse_prometheus(text)
        if not self.kv_capacity:
            for labels, _ in m.get("vllm:cache_config_info", []):
                self._cache_config = dict(labels)
                blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
                if blocks.isdigit() and size.isdigit():
                    self.kv_capacity = int(blocks) * int(size)
        return ServerMetrics(
            running=int(metric_sum(m, "vllm:num_requests_running")),
            waiting=int(metric_sum(m, "vllm:num_requests_waiting")),
            kv_usage=metric_sum(m, "vllm:kv_cache_usage_perc"),
            kv_capacity=self.kv_capacity,
            prefix_queries=metric_sum(m, "vllm:prefix_cache_queries_total"),
            prefix_hits=metric_sum(m, "vllm:prefix_cache_hits_total"),
            raw={name: sum(v for _, v in values) for name, values in m.items()},
        )
