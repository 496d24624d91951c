"""What a serving engine's backend is (`Backend`: how one server's HTTP API is spoken) and what
it gives back (`Reply`, `ServerMetrics`), the errors a server causes, and the Prometheus text
both servers' `/metrics` speak."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

from spex.proto.messages import FINISH_REASONS, FinishReason
from spex.shared.engine.api import EngineRequest

__all__ = [
    "Backend",
    "EngineMisconfigured",
    "EngineUnavailable",
    "Reply",
    "ServerMetrics",
    "metric_sum",
    "parse_prometheus",
    "read_finish",
    "reward_of",
    "server_owner",
]


class EngineUnavailable(RuntimeError):
    """The server is not there or failed a request (a one-line reason)."""


class EngineMisconfigured(EngineUnavailable, ValueError):
    """The server runs without something the configuration needs (a flag, a model)."""


@dataclass(frozen=True)
class Reply:
    """What a backend read from the server's answer to one request."""

    text: str
    generated: int
    prompt_tokens: int
    cached_tokens: int
    finish: FinishReason
    logprobs: tuple[float, ...] = ()
    reward: float | None = None


@dataclass
class ServerMetrics:
    """The server's own view of its load (from `/metrics`)."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0  # fraction of KV in use
    kv_capacity: int = 0  # tokens
    prefix_queries: float = 0.0  # tokens looked up in the prefix cache (cumulative)
    prefix_hits: float = 0.0  # of those, found
    raw: dict[str, float] = field(default_factory=dict)

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


class Backend(Protocol):
    """How one serving engine's HTTP API is spoken."""

    name: str
    server_info: dict[str, object]  # what the server says of itself (version, model, flags), by `check`

    async def check(self, session: aiohttp.ClientSession) -> None:
        """Raise EngineUnavailable (one line: what is missing) unless the server can serve
        this configuration; connection errors propagate (the server is not up yet)."""
        ...

    def generate(self, req: EngineRequest, rid: str) -> tuple[str, dict[str, object]]:
        """(path, JSON body) of the request that runs `req` under the server id `rid`."""
        ...

    def read(self, req: EngineRequest, body: object) -> Reply: ...

    def abort(self, rid: str) -> tuple[str, dict[str, object]] | None:
        """(path, JSON body) of the call that stops `rid`; None where the server has no such
        call and stops a request whose connection closes (vLLM's pooling API)."""
        ...

    async def metrics(self, session: aiohttp.ClientSession) -> ServerMetrics: ...


def read_finish(raw: object) -> FinishReason:
    """A server's finish reason as ours; one we do not know fails the request (its job's
    query hears why) rather than being guessed."""
    for finish in FINISH_REASONS:
        if raw == finish:
            return finish
    raise ValueError(f"unknown finish reason {raw!r}")


async def server_owner(session: aiohttp.ClientSession, url: str) -> str:
    """Whose server is at `url`, by what its `/v1/models` says owns the model ("vllm" and "sglang"
    say so; "" if it does not): both answer OpenAI-style listings, and this tells them apart."""
    async with session.get(url + "/v1/models") as resp:
        body = await resp.json(content_type=None) if resp.status == 200 else {}
    models = body.get("data") if isinstance(body, dict) else None
    first = models[0] if isinstance(models, list) and models else {}
    return str(first.get("owned_by") or "") if isinstance(first, dict) else ""


def reward_of(output: object, positive: int = 1) -> float | None:
    """A reward model's output as a reward in [0, 1] (None if it holds no number): one number is
    a score (squashed by a sigmoid); two are logits, the reward the softmax probability of the
    `positive` one (a classifier's (wrong, right): 1; plus-minus's (good, bad): 0); a list of
    those, one a token or a step tag, is read at its last (where the scored step ends)."""
    if not isinstance(output, list) or not output:
        return None
    if isinstance(output[-1], list):
        output = output[-1]
    if not output or not all(isinstance(x, int | float) and math.isfinite(x) for x in output):
        return None
    values = [float(x) for x in output]
    if len(values) == 1:  # the sigmoid, written so that no score far from 0 overflows exp
        v = values[0]
        return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    return exps[positive] / sum(exps) if len(exps) == 2 else exps[-1] / sum(exps)


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition: metric name -> [(labels, value)] (comments skipped)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, brace, labels_text = head.partition("{")
        labels: dict[str, str] = {}
        if brace:
            for item in _split_labels(labels_text.rstrip("}")):
                key, _, raw = item.partition("=")
                labels[key.strip()] = raw.strip().strip('"')
        try:
            out.setdefault(name.strip(), []).append((labels, float(value)))
        except ValueError:
            continue
    return out


def _split_labels(text: str) -> list[str]:
    """`a="x",b="y,z"` -> ['a="x"', 'b="y,z"'] (commas inside quotes kept)."""
    items: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        items.append("".join(cur))
    return [i for i in items if i.strip()]


def metric_sum(metrics: dict[str, list[tuple[dict[str, str], float]]], *names: str) -> float:
    """The sum over label sets of the first of `names` the server exposes (0 if none)."""
    for name in names:
        if name in metrics:
            return sum(v for _, v in metrics[name])
    return 0.0
