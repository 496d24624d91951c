"""The one validator of a submitted question.

Every way in uses it — the HTTP ingress (`check_fields` on the JSON body, then `validate`),
the Python client, the coordinator (a bad request on the ingress stream is dead-lettered with
the error) and the virtual-time driver — so they accept the same questions with the same
defaults: those of `SubmitQuestionRequest`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_origin

import msgspec

from spex.proto.messages import (
    ANSWER_SELECTIONS,
    ANSWER_WEIGHTS,
    MODES,
    PROMPT_PRESETS,
    Message,
    SubmitQuestionRequest,
)

__all__ = [
    "CLIENT_FIELDS",
    "DEFAULT_MAX_TARGET",
    "MAX_PROMPT_TEXT_CHARS",
    "MAX_PROMPT_TOKENS",
    "MAX_QUESTION_CHARS",
    "MAX_REFERENCE_CHARS",
    "MAX_STEP_DELIMITER_CHARS",
    "MODES",
    "SEARCH_NAME",
    "Limits",
    "SearchCheck",
    "SubmissionError",
    "SubmissionTooLarge",
    "check_query_id",
    "twin_id",
    "check_fields",
    "estimate_tokens",
    "validate",
]

# MODES is the value set of `spex.proto.messages`; the searches a question may name are the
# services' (`Limits.searches`), whose plug-ins add to the built-ins. Every job of a search
# repeats the question (and the path's steps) within the 1 MiB message limit, so the question
# itself is held well below it.
MAX_QUESTION_CHARS = 100_000
MAX_REFERENCE_CHARS = 1_000
# A question's own system prompt and chat template ride on every job too: a chat template of a
# released model is a few thousand characters (Llama 3.1's about 5,000).
MAX_PROMPT_TEXT_CHARS = 32_000
MAX_STEP_DELIMITER_CHARS = 64
MAX_KEY_CHARS = 200  # client keys and query ids
MAX_INT = 2**63 - 1  # what MessagePack's int64 holds
MAX_PROMPT_TOKENS = 10_000_000  # the wire's ceiling; an engine takes far fewer (`Limits`)
QUERY_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
TWIN_SUFFIX = ".baseline"  # a baseline twin's query id: its original's and this
# A search's name: what `spex:<name>-<target>` (the OpenAI face's model) splits unambiguously.
SEARCH_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
DEFAULT_MAX_TARGET = 256  # the largest target of a search the operator names no bound for
MAX_PARAMS = 32  # parameters one question may set
MAX_PARAM_CHARS = 100  # a parameter's name or text value
# A search's check of a question's target and parameters: ValueError saying what is wrong.
SearchCheck = Callable[[int, Mapping[str, float | str]], None]
# Where no tokenizer is at hand (a question sent without `prompt_tokens`, the OpenAI face's
# usage), a text's tokens are estimated as one per this many characters.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Limits:
    """What one question may ask for; the operator's settings (`spex.shared.runtime.settings`)."""

    max_question_chars: int = MAX_QUESTION_CHARS
    max_target: Mapping[str, int] = field(default_factory=dict)  # by search; unnamed: DEFAULT_MAX_TARGET
    client_in_flight: int = 1_000
    # The longest question the generators' engine takes, in tokens (given, or estimated from
    # the text): one it cannot take would be accepted and then fail in the engine.
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    # The searches a question may name, each with the check of its target and parameters (the
    # services': `spex.shared.runtime.searches`). None: any well-formed name and parameters,
    # which a client that does not know the services' plug-ins leaves to them.
    searches: Mapping[str, SearchCheck] | None = None


# What a client may set, and its type: SubmitQuestionRequest's fields but the envelope's (set by
# the client code), `client` (set by the ingress, from the token) and `twin_of` (set on a twin).
_NOT_THE_CLIENTS = {f.name for f in msgspec.structs.fields(Message)} | {"client", "twin_of"}
# A mapping's type is `dict` here (its values are checked by `_params`).
CLIENT_FIELDS: dict[str, type] = {
    f.name: get_origin(f.type) or f.type
    for f in msgspec.structs.fields(SubmitQuestionRequest)
    if f.name not in _NOT_THE_CLIENTS
}


class SubmissionError(ValueError):
    """A submission with a bad field. Unrecoverable: the same submission fails again."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


class SubmissionTooLarge(SubmissionError):
    """A field (the question) longer than the operator allows: HTTP 413."""


def estimate_tokens(text: str) -> int:
    """A text's length in tokens, estimated from its characters (at least 1)."""
    return max(1, len(text) // CHARS_PER_TOKEN)


def check_query_id(qid: str) -> str:
    """`qid` if it is a well-formed query id (letters, digits, `_.:-`, at most 64)."""
    if not QUERY_ID.fullmatch(qid):
        raise SubmissionError("query_id", "letters, digits and _.:- only, 1 to 64 characters")
    return qid


def check_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The client fields of `body` (a decoded JSON object, or keyword arguments), checked by
    name and type: an unknown name or a wrong type raises SubmissionError naming it."""
    for name in sorted(body):
        kind = CLIENT_FIELDS.get(name)
        if kind is None:
            raise SubmissionError(name, "unknown field")
        value = body[name]
        # bool is an int to Python, never to a client: `"target": true` is a type error; a
        # float field takes a whole number too (JSON's 1 is 1.0).
        wanted = (int, float) if kind is float else kind
        if not isinstance(value, wanted) or (kind is not bool and isinstance(value, bool)):
            raise SubmissionError(name, f"expected {kind.__name__}")
    out = dict(body)
    for name in (k for k in body if CLIENT_FIELDS[k] is float):
        out[name] = _float(name, body[name])
    if "params" in body:
        out["params"] = _params(body["params"])
    return out


def _float(name: str, value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # a whole number too large for a float
        raise SubmissionError(name, "out of range") from None


def _params(params: Mapping[object, object]) -> dict[str, float | str]:
    """A question's parameters: names to numbers (as floats) or text."""
    out: dict[str, float | str] = {}
    for name, value in params.items():
        if not isinstance(name, str):
            raise SubmissionError("params", "a parameter's name is text")
        if isinstance(value, str):
            out[name] = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = _float("params", value)
        else:
            raise SubmissionError("params", f"{name[:MAX_PARAM_CHARS]}: expected a number or text")
    return out


def validate(req: SubmitQuestionRequest, limits: Limits | None = None) -> SubmitQuestionRequest:
    """`req` itself if every field holds a searchable value within `limits`, else
    SubmissionError naming the first bad field."""
    limits = limits or Limits()
    if not req.question:
        raise SubmissionError("question", "required")
    if len(req.question) > limits.max_question_chars:
        raise SubmissionTooLarge(
            "question", f"{len(req.question):,} characters; at most {limits.max_question_chars:,}"
        )
    named = (
        ("question", req.question),
        ("reference_answer", req.reference_answer),
        ("client_key", req.client_key),
    )
    for name, text in (*named, *_prompt_texts(req)):
        if not _utf8(text):
            raise SubmissionError(name, "not valid Unicode text (a lone surrogate?)")
    check_query_id(req.query_id)
    if len(req.client_key) > MAX_KEY_CHARS:
        raise SubmissionError("client_key", f"at most {MAX_KEY_CHARS} characters")
    if len(req.reference_answer) > MAX_REFERENCE_CHARS:
        raise SubmissionError("reference_answer", f"at most {MAX_REFERENCE_CHARS:,} characters")
    _check_search(req, limits)
    if not 0 <= req.seed <= MAX_INT:
        raise SubmissionError("seed", f"must be from 0 to 2**63-1, not {req.seed}")
    if req.mode not in MODES:
        raise SubmissionError("mode", f"must be one of {', '.join(MODES)}, not {req.mode!r}")
    if req.prompt_tokens < 0:
        raise SubmissionError("prompt_tokens", f"must be at least 0, not {req.prompt_tokens}")
    most_tokens = limits.max_prompt_tokens
    if req.prompt_tokens > most_tokens:
        raise SubmissionError(
            "prompt_tokens", f"at most {most_tokens:,} (what the engine takes), not {req.prompt_tokens:,}"
        )
    if not req.prompt_tokens and (estimated := estimate_tokens(req.question)) > most_tokens:
        raise SubmissionTooLarge(
            "question", f"about {estimated:,} tokens; the engine takes at most {most_tokens:,}"
        )
    if not (math.isfinite(req.early_stop_alpha) and 0 < req.early_stop_alpha <= 1_000):
        raise SubmissionError(
            "early_stop_alpha", f"must be above 0 and at most 1000, not {req.early_stop_alpha}"
        )
    if not 0 <= req.early_stop_min_answers <= req.target:
        raise SubmissionError(
            "early_stop_min_answers",
            f"must be from 0 (the search's rule) to the target, not {req.early_stop_min_answers}",
        )
    if req.early_stop_weight not in ANSWER_WEIGHTS:
        raise SubmissionError(
            "early_stop_weight", f"must be one of {', '.join(ANSWER_WEIGHTS)}, not {req.early_stop_weight!r}"
        )
    _check_prompt(req)
    if req.baseline_twin and req.mode != "spex":
        raise SubmissionError("baseline_twin", "a twin checks speculation: the question's mode must be spex")
    if req.baseline_twin and req.early_stop:
        raise SubmissionError("baseline_twin", "speculation is lossless with early_stop off: turn one off")
    if req.baseline_twin and not QUERY_ID.fullmatch(twin_id(req.query_id)):
        raise SubmissionError(
            "baseline_twin", f"the query id is too long to name a twin (at most {64 - len(TWIN_SUFFIX)})"
        )
    return req


def _check_search(req: SubmitQuestionRequest, limits: Limits) -> None:
    """The search a question names, its target, parameters and answer selection."""
    known = limits.searches
    if not SEARCH_NAME.fullmatch(req.algorithm) or (known is not None and req.algorithm not in known):
        names = ", ".join(sorted(known)) if known is not None else "a-z, 0-9 and _, 1 to 40"
        raise SubmissionError("algorithm", f"unknown {req.algorithm[:80]!r}; known: {names}")
    if req.target < 1:
        raise SubmissionError("target", f"must be at least 1, not {req.target}")
    most = limits.max_target.get(req.algorithm, DEFAULT_MAX_TARGET)
    if req.target > most:
        raise SubmissionError("target", f"at most {most} for {req.algorithm}, not {req.target}")
    if req.answer_selection and req.answer_selection not in ANSWER_SELECTIONS:
        raise SubmissionError(
            "answer_selection",
            f"must be empty (the search's own) or one of {', '.join(ANSWER_SELECTIONS)}, "
            f"not {req.answer_selection[:80]!r}",
        )
    if len(req.params) > MAX_PARAMS:
        raise SubmissionError("params", f"at most {MAX_PARAMS} parameters, not {len(req.params)}")
    for name, value in req.params.items():
        if not name or len(name) > MAX_PARAM_CHARS or not _utf8(name):
            raise SubmissionError(
                "params", f"a parameter's name is 1 to {MAX_PARAM_CHARS} characters of text"
            )
        if isinstance(value, str) and (len(value) > MAX_PARAM_CHARS or not _utf8(value)):
            raise SubmissionError("params", f"{name}: at most {MAX_PARAM_CHARS} characters of Unicode text")
        if isinstance(value, float) and not math.isfinite(value):
            raise SubmissionError("params", f"{name}: must be finite, not {value}")
    if known is not None:
        try:
            known[req.algorithm](req.target, req.params)
        except ValueError as exc:
            raise SubmissionError("params", f"{req.algorithm}: {exc}") from None


def _prompt_texts(req: SubmitQuestionRequest) -> tuple[tuple[str, str], ...]:
    """The question's own prompt texts, by field name."""
    return (
        ("system_prompt", req.system_prompt),
        ("chat_template", req.chat_template),
        ("step_delimiter", req.step_delimiter),
    )


def _check_prompt(req: SubmitQuestionRequest) -> None:
    """The question's own prompt: a known preset, texts of bounded length (a chat template's
    syntax is checked where it is compiled, `spex.shared.content.prompt_style`)."""
    if req.prompt_preset and req.prompt_preset not in PROMPT_PRESETS:
        raise SubmissionError(
            "prompt_preset", f"one of {', '.join(PROMPT_PRESETS)} (or empty), not {req.prompt_preset!r}"
        )
    for name, text in (("system_prompt", req.system_prompt), ("chat_template", req.chat_template)):
        if len(text) > MAX_PROMPT_TEXT_CHARS:
            raise SubmissionTooLarge(name, f"at most {MAX_PROMPT_TEXT_CHARS:,} characters")
    if len(req.step_delimiter) > MAX_STEP_DELIMITER_CHARS:
        raise SubmissionError("step_delimiter", f"at most {MAX_STEP_DELIMITER_CHARS} characters")


def twin_id(query_id: str) -> str:
    """The query id of `query_id`'s baseline twin."""
    return f"{query_id}{TWIN_SUFFIX}"


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
