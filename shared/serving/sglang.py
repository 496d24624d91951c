"""SGLang's native HTTP API (`python -m sglang.launch_server`, 0.5.23).

The flags a SPEX generator needs, checked against `/server_info` at start-up:
- `--enable-priority-scheduling --schedule-low-priority-values-first`: priority 0 (a primary)
  is admitted before 1 (speculative); without the second flag SGLang runs *higher* values
  first and speculation would go ahead of the search;
- `--enable-metrics`: running and queued requests, KV usage and the prefix-cache hit rate;
- `--enable-deterministic-inference` when SPEX runs deterministic (`SPEX_DETERMINISTIC=1`):
  without it SGLang ignores `sampling_seed` and batch-invariance is not promised;
- the radix cache left on (no `--disable-radix-cache`);
- for a reward model, `--is-embedding` (served through `/classify`).

`/generate` takes `rid`, `text`, `sampling_params` (`max_new_tokens`, `stop`,
`sampling_seed`, `temperature`; synthetic content: `ignore_eos` and `min_new_tokens`),
`return_logprob` and `priority`. `/abort_request {"rid"}` stops every request whose id starts
with the one given — SPEX's ids are of fixed length, so only that one.
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
    reward_of,
    server_owner,
)

__all__ = ["SGLangBackend", "required_flags"]

# The /server_info fields a results file records (an allow-list: others may hold credentials).
RECORDED = (
    "version", "model_path", "dtype", "kv_cache_dtype", "tp_size", "dp_size", "mem_fraction_static",
    "max_total_num_tokens", "max_running_requests", "chunked_prefill_size", "schedule_policy",
    "enable_priority_scheduling", "schedule_low_priority_values_first", "disable_radix_cache",
    "enable_deterministic_inference", "attention_backend", "sampling_backend", "is_embedding",
)  # fmt: skip


def required_flags(reward: bool, deterministic: bool) -> dict[str, tuple[bool, str]]:
    """server_info field -> (the value SPEX needs, the launch flag that sets it)."""
    flags = {
        "enable_metrics": (True, "--enable-metrics"),
        "disable_radix_cache": (False, "no --disable-radix-cache"),
    }
    if reward:
        return flags | {"is_embedding": (True, "--is-embedding")}
    flags |= {
        "enable_priority_scheduling": (True, "--enable-priority-scheduling"),
        "schedule_low_priority_values_first": (True, "--schedule-low-priority-values-first"),
    }
    if deterministic:
        flags["enable_deterministic_inference"] = (True, "--enable-deterministic-inference")
    return flags


class SGLangBackend:
    name = "sglang"

    def __init__(self, url: str, reward: bool = False, deterministic: bool = False) -> None:
        self.url = url.rstrip("/")
        self.reward = reward  # a reward model: prefill-only requests through /classify
        self.deterministic = deterministic
        self.kv_capacity = 0
        self.server_info: dict[str, object] = {}  # what the server says of itself (by `check`)

    async def check(self, session: aiohttp.ClientSession) -> None:
        async with session.get(self.url + "/server_info") as resp:
            status = resp.status
            info = await resp.json(content_type=None) if status == 200 else None
        if status == 404 and await server_owner(session, self.url) == "vllm":
            selector = "SPEX_PRM_ENGINE" if self.reward else "SPEX_ENGINE"
            raise EngineMisconfigured(f"sglang at {self.url}: the server is vLLM's: set {selector}=vllm")
        if status != 200:
            raise EngineUnavailable(f"sglang at {self.url}: /server_info answered {status}")
        missing = [
            flag
            for key, (wanted, flag) in required_flags(self.reward, self.deterministic).items()
            if bool(_find(info, key)) != wanted
        ]
        if missing:
            raise EngineMisconfigured(f"sglang at {self.url}: start the server with {' '.join(missing)}")
        self.kv_capacity = int(_find(info, "max_total_num_tokens") or 0)
        # Its launch flags as far as they shape a benchmark; none that may hold a secret.
        self.server_info = {
            "engine": "sglang",
            "model": _find(info, "served_model_name") or _find(info, "model_path"),
        }
        self.server_info |= {k: _find(info, k) for k in RECORDED}

    def generate(self, req: EngineRequest, rid: str) -> tuple[str, dict[str, object]]:
        text = "".join(req.text)
        if self.reward:  # a reward model scores the whole path in one pass
            return "/classify", {"rid": rid, "text": text, "priority": req.priority}
        params: dict[str, object] = {"temperature": req.temperature, "sampling_seed": req.seed}
        if req.output_tokens == UNTIL_STOP:
            params |= {"max_new_tokens": req.max_new_tokens, "stop": list(req.stop)}
            if req.min_tokens:  # SGLang holds back EOS too until then (the HF engine does not)
                params["min_new_tokens"] = req.min_tokens
        else:  # exactly this many tokens (the synthetic content mode)
            n = req.output_tokens
            params |= {"max_new_tokens": n, "min_new_tokens": n, "ignore_eos": True}
        body = {
            "rid": rid,
            "text": text,
            "sampling_params": params,
            "return_logprob": True,
            "priority": req.priority,
            "stream": False,
        }
        return "/generate", body

    def read(self, req: EngineRequest, body: Any) -> Reply:
        meta = body.get("meta_info") or {}
        prompt, cached = int(meta.get("prompt_tokens") or 0), int(meta.get("cached_tokens") or 0)
        if self.reward:
            return Reply("", 0, prompt, cached, "length", reward=reward_of(body.get("embedding")))
        reason = meta.get("finish_reason") or {}
        if isinstance(reason, dict):
            kind, matched = str(reason.get("type") or "stop"), reason.get("matched")
        else:
            kind, matched = str(reason), None
        if kind == "stop" and not isinstance(matched, str):
            kind = "eos"  # matched a stop token (EOS), not a stop string
        logprobs = tuple(
            float(t[0]) for t in meta.get("output_token_logprobs") or [] if t and t[0] is not None
        )
        return Reply(
            text=body.get("text") or "",
            generated=int(meta.get("completion_tokens") or len(logprobs)),
            prompt_tokens=prompt,
            cached_tokens=cached,
            finish=read_finish(kind),
            logprobs=logprobs,
        )

    def abort(self, rid: str) -> tuple[str, dict[str, object]]:
        return "/abort_request", {"rid": rid}

    async def metrics(self, session: aiohttp.ClientSession) -> ServerMetrics:
        async with session.get(self.url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            text = await resp.text()
        m = parse_prometheus(text)
        capacity = self.kv_capacity or int(metric_sum(m, "sglang:max_total_num_tokens"))
        return ServerMetrics(
            running=int(metric_sum(m, "sglang:num_running_reqs")),
            waiting=int(metric_sum(m, "sglang:num_queue_reqs")),
            kv_usage=metric_sum(m, "sglang:token_usage"),
            kv_capacity=capacity,
            prefix_queries=metric_sum(m, "sglang:prompt_tokens_total"),
            prefix_hits=metric_sum(m, "sglang:cached_tokens_total"),
            raw={name: sum(v for _, v in values) for name, values in m.items()},
        )


def _find(info: object, key: str) -> Any:
    """`key` in server_info, at the top or in a nested section (the layout moved between
    releases)."""
    if isinstance(info, dict):
        if key in info:
            return info[key]
        for value in info.values():
            found = _find(value, key)
            if found is not None:
                return found
    return None
