"""What each parameter of a chat completions request does on SPEX's OpenAI face
(`spex.services.ingress.openai_api`): every one it is sent is honoured, or refused with a 400 in
OpenAI's shape whose `param` names it — none is accepted and ignored.

Honoured (`HONOURED` says how): `model` names the search, the one user message is the
question (a system message before it, the question's system prompt), `max_tokens` /
`max_completion_tokens` cap the reply's tokens (the content is cut, `finish_reason: "length"`),
`stop` cuts the content before the first stop string, `stream` and
`stream_options.include_usage` as OpenAI's, `temperature` only at the operator's sampling
temperature (one search samples every step at it), `n` only 1 (one search gives one answer),
`user` / `safety_identifier` (at most `MAX_USER_CHARS` each) go into the ingress's log line for
the question as a digest, never as sent, and SPEX's own
client fields (`EXTRA_FIELDS`) ride beside them, `seed` (OpenAI's own: the search's seed)
among them. The parameters SPEX cannot honour (`NEUTRAL`) are accepted only at a value that
asks for nothing (`top_p: 1`, `logprobs: false`, `tools: []`, ...); an unknown one is refused
(as OpenAI refuses it).

Tokens: the ingress holds no tokenizer (the engines' tokenizers live in the generators), so a
text's tokens are `submission.estimate_tokens`'s, the estimate the coordinator charges a
question with: `usage.prompt_tokens` is the question's, and a reply cut at `max_tokens` holds
at most that many by the same count.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from spex.proto import SubmissionError, submission
from spex.services.ingress.openai_bodies import Usage
from spex.shared.content.prompts import DEFAULT_TEMPERATURE

__all__ = ["EXTRA_FIELDS", "HONOURED", "MODEL", "NEUTRAL", "ChatAsk", "ParamError", "chat_ask", "parse_model"]

MODEL = re.compile(rf"spex:(?P<algorithm>{submission.SEARCH_NAME.pattern})(?:-(?P<target>[0-9]{{1,6}}))?")
# SPEX's own client fields a body carries beside `model` (the algorithm and the target) and
# `messages` (the question): the rest of the submission's, `seed` (OpenAI's own) among them,
# but its client key, prompt tokens and baseline twin (a reply has no place for the twin's
# verdict: ask for one through /v1/questions).
EXTRA_FIELDS = tuple(
    name
    for name in submission.CLIENT_FIELDS
    if name not in ("question", "algorithm", "client_key", "prompt_tokens", "baseline_twin")
)
MAX_STOPS = 4  # OpenAI's own limit on `stop`'s strings
MAX_USER_CHARS = 256  # `user` and `safety_identifier`: an end user's id, not a document
# The OpenAI parameters SPEX honours: each one's JSON type and how it is honoured (the
# reference's table; the checks are `chat_ask`'s).
HONOURED: dict[str, tuple[str | list[str], str]] = {
    "model": ("string", "the search: spex:<algorithm>[-<target>] (GET /v1/models lists some)"),
    "messages": (
        "array",
        "one user message: the question, after at most one system message: the question's system prompt "
        "(as the system_prompt field; a conversation is refused)",
    ),
    "max_tokens": ("integer", "a cap on the reply's tokens: a longer reply is cut, finish_reason length"),
    "max_completion_tokens": ("integer", "as max_tokens (both sent: the smaller)"),
    "stop": (["string", "array"], f"up to {MAX_STOPS} strings: the reply ends before the first of them"),
    "stream": ("boolean", "send chat.completion.chunk events (the tree's, then the reply's), then [DONE]"),
    "stream_options": ("object", "with stream: {include_usage: true} sends a last chunk with the usage"),
    "temperature": (
        "number",
        f"only the operator's SPEX_SAMPLING_TEMPERATURE ({DEFAULT_TEMPERATURE:g} unless set): one search "
        "samples every step at it",
    ),
    "n": ("integer", "only 1: one search gives one answer (ask n times, with n seeds, for n)"),
    "user": (
        "string",
        f"at most {MAX_USER_CHARS} characters; its digest (not the text) goes into the ingress's log line "
        "for the question, to trace abuse by",
    ),
    "safety_identifier": ("string", "as user"),
}
# The parameters SPEX cannot honour: each one's JSON type, the values that ask for nothing it
# lacks (leaving one out, or null, is the same) and why any other is refused.
NEUTRAL: dict[str, tuple[str | list[str], tuple[object, ...], str]] = {
    "top_p": ("number", (1,), "the generators sample the whole distribution"),
    "frequency_penalty": ("number", (0,), "the generators apply no penalties"),
    "presence_penalty": ("number", (0,), "the generators apply no penalties"),
    "logit_bias": ("object", ({},), "the generators take no logit bias"),
    "logprobs": ("boolean", (False,), "the reply carries no log-probabilities"),
    "top_logprobs": ("integer", (0,), "the reply carries no log-probabilities"),
    "tools": ("array", ([],), "SPEX calls no tools"),
    "tool_choice": (["string", "object"], ("none",), "SPEX calls no tools"),
    "parallel_tool_calls": ("boolean", (), "SPEX calls no tools"),
    "functions": ("array", ([],), "SPEX calls no functions"),
    "function_call": (["string", "object"], ("none",), "SPEX calls no functions"),
    "response_format": ("object", ({"type": "text"},), "the reply is the solution's text"),
    "modalities": ("array", (["text"],), "the reply is text"),
    "audio": ("object", (), "the reply is text"),
    "prediction": ("object", (), "a search's reply cannot be predicted"),
    "reasoning_effort": (
        "string",
        (),
        "a search's effort is its target: name it in the model (spex:rebase-16)",
    ),
    "verbosity": ("string", (), "the reply is the solution's steps"),
    "store": ("boolean", (False,), "SPEX stores no completions"),
    "metadata": ("object", ({},), "SPEX stores no completions to tag"),
    "service_tier": ("string", ("auto", "default"), "SPEX serves one tier"),
    "prompt_cache_key": ("string", (), "SPEX places a question's jobs by its own affinity"),
    "web_search_options": ("object", (), "SPEX searches no web"),
}
_KNOWN = {*HONOURED, *NEUTRAL, *EXTRA_FIELDS}  # model and messages among them
T = TypeVar("T")


class ParamError(SubmissionError):
    """A request SPEX's OpenAI face refuses: the parameter, why, OpenAI's error code for it
    and the HTTP status (400, or 404 for a model it does not serve)."""

    def __init__(self, param: str, problem: str, code: str, status: int = 400) -> None:
        super().__init__(param, problem)
        self.code, self.status = code, status


@dataclass(frozen=True)
class ChatAsk:
    """A chat completions request, checked: the search to run and what the reply must be."""

    algorithm: str
    question: str
    fields: dict[str, Any] = field(default_factory=dict)  # the submission's other client fields (checked)
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    max_tokens: int | None = None  # None: the whole reply
    stop: tuple[str, ...] = ()
    user: str = ""

    def reply(self, text: str) -> tuple[str, str]:
        """(content, finish_reason) of a reply of `text`: cut before the first stop string
        ("stop"), then to `max_tokens` tokens ("length")."""
        cuts = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if cuts:
            text = text[: min(cuts)]
        if self.max_tokens is not None and completion_tokens(text) > self.max_tokens:
            return text[: self.max_tokens * submission.CHARS_PER_TOKEN], "length"
        return text, "stop"

    def usage(self, content: str) -> Usage:
        """OpenAI's usage of a reply `content`: its tokens and the question's."""
        prompt, completion = submission.estimate_tokens(self.question), completion_tokens(content)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_tokens(content: str) -> int:
    return submission.estimate_tokens(content) if content else 0


def parse_model(name: object, searches: Collection[str]) -> tuple[str, int | None]:
    """(algorithm, target or None) of a model name; a 404 ParamError naming `model` if it is
    not one of ours (`searches`: the names served)."""
    m = MODEL.fullmatch(name) if isinstance(name, str) else None
    if m is None or m["algorithm"] not in searches:
        known = ", ".join(sorted(searches))
        problem = (
            f"no model {str(name)[:64]!r}: expected spex:<algorithm>[-<target>], algorithm one of {known}"
        )
        raise ParamError("model", problem, "model_not_found", status=404)
    return m["algorithm"], int(m["target"]) if m["target"] else None


def chat_ask(body: Mapping[str, object], temperature: float, searches: Collection[str]) -> ChatAsk:
    """The checked request of a chat completions body; ParamError naming the first parameter
    refused. `temperature`: the operator's sampling temperature, the one accepted; `searches`:
    the names of the searches served."""
    for name in sorted(body):
        if name not in _KNOWN:
            extra = ", ".join(EXTRA_FIELDS)
            raise ParamError(
                name, f"unknown parameter (SPEX's own beside OpenAI's: {extra})", "unknown_parameter"
            )
    given = {k: v for k, v in body.items() if v is not None}  # null: left out, as OpenAI reads it
    for name, value in given.items():
        if name in NEUTRAL:
            _, neutral, why = NEUTRAL[name]
            if not any(_same(value, ok) for ok in neutral):
                allowed = "".join(f"send {json.dumps(ok)}, or " for ok in neutral)
                raise ParamError(name, f"{why}: {allowed}leave it out", "unsupported_value")
    for name in ("model", "messages"):
        if name not in given:
            raise ParamError(name, "required", "missing_required_parameter")
    algorithm, target = parse_model(given["model"], searches)
    _check_sampling(given, temperature)
    stream = _typed(given, "stream", bool, False)
    options = _typed(given, "stream_options", dict, {})
    if options and not stream:
        raise ParamError("stream_options", "only with stream: true", "invalid_value")
    for key in options:
        if key != "include_usage":
            raise ParamError(
                f"stream_options.{key}", "unknown option (include_usage is known)", "unknown_parameter"
            )
    include_usage = _typed(options, "include_usage", bool, False, param="stream_options.include_usage")
    caps = [_cap(given, name) for name in ("max_tokens", "max_completion_tokens") if name in given]
    users = [_typed(given, name, str, "") for name in ("user", "safety_identifier")]
    for name, given_user in zip(("user", "safety_identifier"), users, strict=True):
        if len(given_user) > MAX_USER_CHARS:
            raise ParamError(name, f"at most {MAX_USER_CHARS} characters", "string_above_max_length")
    user = " / ".join(u for u in users if u)
    fields = {k: given[k] for k in EXTRA_FIELDS if k in given}
    if target is not None:
        fields.setdefault("target", target)
    question, system = _question(body.get("messages"))
    if system is not None:
        if "system_prompt" in fields:
            raise ParamError("messages[0]", "a system message and system_prompt: send one", "invalid_value")
        fields["system_prompt"] = system
    return ChatAsk(
        algorithm, question, submission.check_fields(fields), stream, include_usage,
        min(caps) if caps else None, _stops(given.get("stop")), user,
    )  # fmt: skip


def _same(value: object, ok: object) -> bool:
    """`value` is `ok` as JSON reads it: 1 and 1.0 alike, never true for 1 nor false for 0."""
    if isinstance(value, bool) or isinstance(ok, bool):
        return type(value) is type(ok) and value == ok
    return bool(value == ok)


_KIND_NAMES = {bool: "a boolean", dict: "an object", str: "a string", int: "an integer"}


def _typed(given: Mapping[str, object], name: str, kind: type[T], default: T, param: str = "") -> T:
    """`given[name]` if it is of JSON type `kind` (absent or null: `default`)."""
    value = given.get(name, default)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ParamError(param or name, f"expected {_KIND_NAMES[kind]}", "invalid_type")
    return value


def _check_sampling(given: Mapping[str, object], temperature: float) -> None:
    """`temperature` only the operator's; `n` only 1."""
    if "temperature" in given:
        value = given["temperature"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ParamError("temperature", "expected a number", "invalid_type")
        if value != temperature:
            raise ParamError(
                "temperature",
                f"the search samples at the operator's SPEX_SAMPLING_TEMPERATURE: send {temperature:g}, "
                "or leave it out",
                "unsupported_value",
            )
    if "n" in given and not _same(given["n"], 1):
        raise ParamError("n", "one search gives one answer: send 1, or leave it out", "unsupported_value")


def _cap(given: Mapping[str, object], name: str) -> int:
    value = _typed(given, name, int, 0)
    if value < 1:
        raise ParamError(name, f"must be at least 1, not {value}", "invalid_value")
    return int(value)


def _stops(stop: object) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ParamError("stop", "expected a non-empty string or a list of them", "invalid_type")
    if len(stops) > MAX_STOPS:
        raise ParamError("stop", f"at most {MAX_STOPS} strings, not {len(stops)}", "invalid_value")
    return tuple(stops)


def _question(messages: object) -> tuple[str, str | None]:
    """The text of the one user message, and of the system message before it (None: none)."""
    if not isinstance(messages, list) or not messages:
        raise ParamError("messages", "expected a non-empty list of messages", "invalid_type")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ParamError(f"messages[{i}]", "expected an object: role and content", "invalid_type")
        role = message.get("role")
        if role != "user" and not (role == "system" and i == 0 and len(messages) > 1):
            raise ParamError(
                f"messages[{i}]",
                f"a {role!r} message: SPEX answers one user message, after at most one system message",
                "unsupported_value",
            )
        for key in message:
            if key not in ("role", "content"):
                raise ParamError(
                    f"messages[{i}].{key}", "unknown field (role and content are known)", "unknown_parameter"
                )
    system = _text(messages[0], 0) if messages[0].get("role") == "system" else None
    if len(messages) > (1 if system is None else 2):
        raise ParamError("messages", "a conversation: SPEX answers one user message", "unsupported_value")
    return _text(messages[-1], len(messages) - 1), system


def _text(message: Mapping[str, object], i: int) -> str:
    """A message's content: a string, or a list of text parts joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ParamError(f"messages[{i}].content", "expected text or a list of text parts", "invalid_type")
    texts = []
    for j, part in enumerate(content):
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            raise ParamError(f"messages[{i}].content[{j}]", "only text parts are read", "unsupported_value")
        texts.append(part["text"])
    return "\n".join(texts)
