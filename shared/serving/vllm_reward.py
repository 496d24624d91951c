"""A reward model served by vLLM (0.32) through its pooling API, beside SGLang's `/classify`
(`spex.shared.serving.sglang`): `python -m vllm.entrypoints.openai.api_server --model DIR
--runner pooling --scheduling-policy priority`, and per family (`SPEX_PRM_KIND`,
`spex.shared.content.reward_prompts`):
- `token-classification` (`…ForTokenClassification`, SPEX's own: `spex model init --prm`; vLLM's
  `token_classify` task): a row of two logits (wrong, right) a token; an outcome model
  (`…ForSequenceClassification`, `classify`) gives one row for the whole text.
- `step-tag` (`Qwen2ForProcessRewardModel`, which vLLM serves itself with the `STEP` token pooler,
  vllm/model_executor/models/qwen2_rm.py): a row of two logits at each token whose id is the
  pooler's `step_tag_id` — Qwen2.5-Math-PRM's `<extra_0>`, 151651, unless
  `--pooler-config '{"step_tag_id": N}'` names another (vllm/model_executor/models/config.py).
- `plus-minus` (a causal LM): vLLM 0.32 pools a causal LM's hidden states, not its logits, so the
  `STEP` pooler's `returned_token_ids` would pick hidden dimensions; the good and bad tokens'
  logits come from its classification conversion instead, whose head is those tokens' rows of
  the LM head (vllm/model_executor/models/adapters.py, `load_weights_no_post_processing`):
  `--convert classify --hf-overrides '{"classifier_from_token": [GOOD, BAD], "method":
  "no_post_processing"}'` (the tokens as the tokenizer spells them), a row (good, bad) a token.
The text SPEX sends ends where the step's score is read, so the reward is read from the last row
(`backend.reward_of`: one number, a sigmoid; two, the softmax probability of right, or of good).

What SPEX needs of the server, checked at start against a probe of one step written as the
family writes it:
- a pooling model (`--runner pooling`; vLLM picks it for the architectures above): a model
  served for generation has no `/pooling`;
- a score, not an embedding: one or two numbers a row (two for a step-tag or plus-minus model),
  and a row at the step tag (the step-tag pooler's tag is SPEX's).
Start it with `--scheduling-policy priority` too, so a primary's score goes before a speculative
one's: a server that refuses a priority (vLLM before 0.32) is refused, naming the flag; 0.32
takes one without that policy and runs its requests first come, first served, which a client
cannot see.

A request is `{"model", "input", "request_id", "priority", "use_activation": false,
"add_special_tokens": false}`: the raw logits (SPEX squashes them itself, whatever the pooler's
default), the text tokenized as the in-process reward model tokenizes it. vLLM has no abort
call for a pooling request; it aborts one whose client closes the connection, which is how
SPEX stops one (`abort` gives no call to make).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from spex.shared.content.reward_prompts import RewardFormat
from spex.shared.engine.api import EngineRequest
from spex.shared.serving.backend import (
    EngineMisconfigured,
    EngineUnavailable,
    Reply,
    ServerMetrics,
    reward_of,
    server_owner,
)
from spex.shared.serving.vllm import VLLMBackend

__all__ = ["POOLING_PATH", "VLLMRewardBackend"]

POOLING_PATH = "/pooling"
SCORE_WIDTHS = (1, 2)  # numbers in a row of a reward model's output: a score, or wrong/right logits


class VLLMRewardBackend:
    """`/pooling` for the requests; `/v1/models`, `/version` and `/metrics` read as for a
    generator (`VLLMBackend`'s)."""

    name = "vllm"

    def __init__(self, url: str, model: str = "", prm: RewardFormat | None = None) -> None:
        self.server = VLLMBackend(url, model)
        self.prm = prm or RewardFormat()
        self.url = self.server.url
        self.server_info: dict[str, object] = {}  # what the server says of itself (by `check`)
        self.cache_salt: str | None = None  # a prefix-cache namespace of one's own (as a generator's)

    @property
    def model(self) -> str:
        return self.server.model

    async def check(self, session: aiohttp.ClientSession) -> None:
        version = await self.server.served(session)
        probe = self._body(self.prm.probe(), "spex-probe", priority=1)
        async with session.post(self.url + POOLING_PATH, json=probe) as resp:
            text = await resp.text()  # read to the end: the connection goes back to the pool
            status = resp.status
        if status == 404:
            raise EngineMisconfigured(f"vllm at {self.url}: {await self._no_pooling(session)}")
        if status != 200 and "priority" in text:
            raise EngineMisconfigured(f"vllm at {self.url}: start it with --scheduling-policy priority")
        if status != 200:
            raise EngineUnavailable(f"vllm at {self.url}: {POOLING_PATH} answered {status}: {text[:200]}")
        try:
            rows = _rows(json.loads(text))
        except ValueError:
            raise EngineUnavailable(
                f"vllm at {self.url}: {POOLING_PATH} answered no JSON: {text[:200]}"
            ) from None
        problem = self._probe_problem(rows)
        if problem:
            raise EngineMisconfigured(f"vllm at {self.url}: {problem}")
        metrics = await self.metrics(session)  # the KV capacity, from its cache configuration
        self.server_info = {
            "engine": "vllm",
            "version": version,
            "model": self.model,
            "runner": "pooling",
            "kv_capacity": metrics.kv_capacity,
        }

    def _probe_problem(self, rows: object) -> str:
        """Why the probe's rows are not this family's score ("" if they are)."""
        kind, width = self.prm.kind, _width(rows)
        if kind == "step-tag" and rows == []:
            flag = json.dumps({"step_tag_id": "N"}).replace('"N"', "N")
            return (
                f"{POOLING_PATH} gives no row at the step tag {self.prm.tag!r}: start it with "
                f"--pooler-config '{flag}', N the tag's id in the model's tokenizer (vLLM's default is "
                "Qwen2.5-Math-PRM's <extra_0>, 151651)"
            )
        if kind == "plus-minus" and width != 2:
            tokens = list(self.prm.tokens)
            overrides = json.dumps({"classifier_from_token": tokens, "method": "no_post_processing"})
            return (
                f"{POOLING_PATH} gives {width} numbers a row, not the good and bad tokens' logits: start "
                f"it with --convert classify --hf-overrides '{overrides}' (the tokens as its tokenizer "
                "spells them)"
            )
        widths = SCORE_WIDTHS if kind == "token-classification" else (2,)
        if width not in widths or reward_of(rows) is None:
            return (
                f"{POOLING_PATH} gives {width} numbers a row, not a reward: serve a …ForTokenClassification "
                "or …ForSequenceClassification model of 1 or 2 labels (of 2 for a step-tag model)"
            )
        return ""

    async def metrics(self, session: aiohttp.ClientSession) -> ServerMetrics:
        return await self.server.metrics(session)

    async def _no_pooling(self, session: aiohttp.ClientSession) -> str:
        """Why the server has no `/pooling`: a model served for generation, or not vLLM at all."""
        if await server_owner(session, self.url) == "sglang":
            return "the server is SGLang's: set SPEX_PRM_ENGINE=sglang"
        return f"no {POOLING_PATH}: serve the reward model with --runner pooling (not for generation)"

    def generate(self, req: EngineRequest, rid: str) -> tuple[str, dict[str, object]]:
        return POOLING_PATH, self._body("".join(req.text), rid, req.priority)

    def _body(self, text: str, rid: str, priority: int) -> dict[str, object]:
        body: dict[str, object] = {
            "model": self.model,
            "input": text,
            "request_id": rid,
            "priority": priority,
            "use_activation": False,
            "add_special_tokens": False,
        }
        if self.cache_salt:
            body["cache_salt"] = self.cache_salt
        return body

    def read(self, req: EngineRequest, body: Any) -> Reply:
        prompt = int((body.get("usage") or {}).get("prompt_tokens") or 0)
        return Reply("", 0, prompt, 0, "length", reward=reward_of(_rows(body), self.prm.positive))

    def abort(self, rid: str) -> None:
        """No call: the engine closes the request's connection, which vLLM takes as an abort."""
        return None


def _width(rows: object) -> int:
    """Numbers in a row of `rows` (its last, where there is a row a token)."""
    if not isinstance(rows, list) or not rows:
        return 0
    return len(rows[-1]) if isinstance(rows[-1], list) else len(rows)


def _rows(body: object) -> object:
    """The first input's output in a `/pooling` reply: a row, or a row a token (None if absent)."""
    data = body.get("data") if isinstance(body, dict) else None
    return data[0].get("data") if isinstance(data, list) and data and isinstance(data[0], dict) else None
