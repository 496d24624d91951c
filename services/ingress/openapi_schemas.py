"""The JSON schemas of the ingress's OpenAPI document (`spex.services.ingress.openapi`): what its
routes take and answer.

A question's fields are read off the wire contract: their names, types and defaults are
`spex.proto.submission.CLIENT_FIELDS` and `SubmitQuestionRequest`'s, their value sets and
bounds the ones `spex.proto.submission.validate` checks (a test holds the two equal). The
answer's, a node's and the overview's are what `spex.services.ingress.watch.answer_json`,
`spex.shared.runtime.views.node_json` and `views.overview` return (tests hold them equal too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

import msgspec

from spex.proto import (
    CONTENTS,
    FINISH_REASONS,
    MODES,
    NODE_STATES,
    SubmitQuestionRequest,
    submission,
)
from spex.proto.messages import ANSWER_SELECTIONS, ANSWER_WEIGHTS, PROMPT_PRESETS
from spex.proto.submission import MAX_PROMPT_TOKENS
from spex.services.ingress.openai_params import EXTRA_FIELDS, HONOURED, MODEL, NEUTRAL
from spex.shared.runtime.views import SERVED_REWARDS

__all__ = ["BOUNDS", "SHAPES", "Schema", "client_fields", "ref", "schemas"]

Schema = dict[str, Any]

# A client field's JSON type, by its Python type (`CLIENT_FIELDS`'s values).
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}
# The value set a client field's value must be in, as `submission.validate` checks it.
_VALUE_SETS: dict[str, tuple[str, ...]] = {
    "answer_selection": ("", *ANSWER_SELECTIONS),
    "mode": MODES,
    "early_stop_weight": ANSWER_WEIGHTS,
    "prompt_preset": ("", *PROMPT_PRESETS),
}
# The fixed bounds `submission.validate` holds a client field to (the operator's limits, the
# question's length and the target's maximum, are settings: the field's meaning names them).
BOUNDS: dict[str, Schema] = {
    "question": {"minLength": 1},
    "client_key": {"maxLength": submission.MAX_KEY_CHARS},
    "reference_answer": {"maxLength": submission.MAX_REFERENCE_CHARS},
    "target": {"minimum": 1},
    "seed": {"minimum": 0, "maximum": submission.MAX_INT},
    "prompt_tokens": {"minimum": 0, "maximum": MAX_PROMPT_TOKENS},
    "early_stop_alpha": {"exclusiveMinimum": 0, "maximum": 1_000},
    "early_stop_min_answers": {"minimum": 0},
    "system_prompt": {"maxLength": submission.MAX_PROMPT_TEXT_CHARS},
    "chat_template": {"maxLength": submission.MAX_PROMPT_TEXT_CHARS},
    "step_delimiter": {"maxLength": submission.MAX_STEP_DELIMITER_CHARS},
}
# The shape of the fields a bound does not say: a search's name (which search is the services'
# to say: their plug-ins add to the built-ins) and the parameters' map.
SHAPES: dict[str, Schema] = {
    "algorithm": {"pattern": f"^{submission.SEARCH_NAME.pattern}$"},
    "params": {
        "maxProperties": submission.MAX_PARAMS,
        "additionalProperties": {"type": ["number", "string"], "maxLength": submission.MAX_PARAM_CHARS},
    },
}
# What each client field means; a field added to the contract without one fails `schemas`.
_MEANINGS = {
    "question": "the question to search (at most SPEX_MAX_QUESTION_CHARS characters; longer: a 413)",
    "client_key": "idempotency key: one question per key (per client); another question under it: a 409",
    "algorithm": "the search: a built-in or a plug-in the services load (GET /v1/models lists them; "
    "an unknown one: a 400 naming those known)",
    "target": "REBASE/ETS width, beams or solutions, or MCTS rollouts (at most SPEX_MAX_TARGET for its "
    "search)",
    "params": "the search's parameters by name, numbers or text (GET /v1/models lists each search's, with "
    "their defaults; an unknown name or a bad value: a 400)",
    "answer_selection": "how the answer is chosen among the solutions: majority, weighted or best (empty: "
    "the search's own)",
    "seed": "the search's seed (with its query id, what its random choices derive from)",
    "mode": "baseline: searched plainly; spex: with speculation",
    "prompt_tokens": "the question's length in tokens (0: estimated from the text)",
    "reference_answer": "if given, the answer is graded against it (math-verify)",
    "early_stop": "T3, adaptive early termination: stop once the answer is settled (may change it)",
    "early_stop_alpha": "T3's margin scale α",
    "early_stop_min_answers": "T3 waits for this many answers (0: the search's rule; at most the target)",
    "early_stop_weight": "an answer's T3 weight: its path's lowest step reward (min), or its own (last)",
    "baseline_twin": (
        "also search it with speculation off (same question, seed and search; early_stop off): "
        "the answer reports both trees' digests and whether they are the same"
    ),
    "prompt_preset": (
        "real content: this question's prompt preset, in place of the deployment's prompt (empty: the "
        "deployment's): spex or search-and-learn; the texts below replace its own"
    ),
    "system_prompt": "real content: the system turn, for SPEX's instruction and example (empty: as set)",
    "chat_template": (
        "real content: a Jinja chat template for the generator, in place of its tokenizer's (empty: as set); "
        "one that does not compile: a 400"
    ),
    "step_delimiter": "real content: what ends a step, its stop string and the prompt's join (empty: as set)",
}


def ref(name: str) -> Schema:
    """A reference to the schema `name` of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def _t(kind: str | list[str], description: str = "", **more: Any) -> Schema:
    """A schema of JSON type `kind` (a list: any of them), saying what it means."""
    schema: Schema = {"type": kind, **more}
    if description:
        schema["description"] = description
    return schema


def _object(properties: dict[str, Schema], required: Collection[str] | None = None) -> Schema:
    """An object of these properties, every one always there unless `required` says which."""
    return {"type": "object", "properties": properties, "required": list(required or properties)}


def _unnamed(pattern: str) -> str:
    """A Python pattern's named groups as plain ones: JSON Schema's patterns are ECMA 262's."""
    return re.sub(r"\(\?P<\w+>", "(", pattern)


def client_fields() -> dict[str, Schema]:
    """The schema of each client field: its type, value set, bounds, default and meaning."""
    defaults = {f.name: f.default for f in msgspec.structs.fields(SubmitQuestionRequest)}
    factories = {f.name: f.default_factory for f in msgspec.structs.fields(SubmitQuestionRequest)}
    out: dict[str, Schema] = {}
    for name, kind in submission.CLIENT_FIELDS.items():
        schema = _t(_JSON_TYPES[kind], _MEANINGS[name], **BOUNDS.get(name, {}), **SHAPES.get(name, {}))
        if name in _VALUE_SETS:
            schema["enum"] = list(_VALUE_SETS[name])
        if defaults[name] is not msgspec.NODEFAULT:
            schema["default"] = defaults[name]
        elif factories[name] is not msgspec.NODEFAULT:
            schema["default"] = factories[name]()
        out[name] = schema
    return out


def _question() -> Schema:
    fields = client_fields()
    required = [name for name, schema in fields.items() if "default" not in schema]
    return {"type": "object", "properties": fields, "required": required, "additionalProperties": False}


def _served(description: str) -> Schema:
    """What answers questions (`views.served_json`)."""
    engine = _t("string", "sim (a simulated GPU), hf (in process), vllm or sglang")
    content = _t("string", "real: the model's text; synthetic: the workload's stand-ins", enum=list(CONTENTS))
    reward = _t(
        "string",
        "prm: a reward model's; logprob: the model's own log-probabilities; sim-prm, sim-logprob: the "
        "synthetic workload's simulated ones",
        enum=list(SERVED_REWARDS),
    )
    properties = {
        "engine": engine,
        "model": _t(["string", "null"], "the generator's model (null on sim)"),
        "content": content,
        "reward": reward,
        "demonstration": _t(
            "string", "there for synthetic content: what it is, and that it is not a model's"
        ),
    }
    schema = _object(properties, required=["engine", "model", "content", "reward"])
    return schema | {"type": ["object", "null"], "description": description}


def _answer() -> Schema:
    properties = {
        "status": _t("string", "what became of it", enum=["answered", "failed", "cancelled"]),
        "answer": _t(["string", "null"], "the chosen answer (null: none was found)"),
        "correct": _t(["boolean", "null"], "graded against the reference answer, if one was sent"),
        "solution": _t("array", "the steps of the best solution", items=_t("string")),
        "nodes": _t("integer", "nodes the search generated"),
        "tokens_generated": _t("integer"),
        "latency_s": _t("number", "from submission to answer"),
        "tree_digest": _t("string", "a digest of the searched tree: the same search, the same digest"),
        "early_stopped": _t("boolean", "T3 stopped the search"),
        "speculative_issued": _t("integer", "speculative jobs issued for it"),
        "speculative_adopted": _t("integer", "... that the search used"),
        "served_by": _served("what answered it (null: stored by a coordinator that did not record it)"),
        "baseline_twin": _object(
            {
                "query_id": _t("string", "the twin's: searched with speculation off, same seed"),
                "status": _t("string", enum=["searching", "answered", "failed", "cancelled"]),
                "answer": _t(["string", "null"]),
                "tree_digest": _t("string"),
                "lossless": _t(["boolean", "null"], "the two trees the same (null until both are answered)"),
            },
            required=["query_id", "status", "lossless"],
        ),
        "error": _t("string", "why the query failed (there only when it did)"),
    }
    optional = ("error", "baseline_twin")  # there only when it failed; only when a twin was asked for
    return _object(properties, required=[name for name in properties if name not in optional])


def _nodes() -> dict[str, Schema]:
    """A node as its events carry it (`views.node_json`), and as the tree holds it
    (`views.fold_tree`: its latest fields, and when each thing happened to it)."""
    fields = {
        "id": _t("string"),
        "parent": _t(["string", "null"], "null for the root"),
        "index": _t("integer", "its place among its parent's children"),
        "action": _t("string"),
        "depth": _t("integer"),
        "state": _t("string", enum=list(NODE_STATES)),
        "generated": _t("boolean"),
        "running": _t("boolean"),
        "text": _t("string"),
        "tokens": _t("integer"),
        "answer": _t(["string", "null"]),
        "reward": _t(["number", "null"]),
        "finish_reason": _t("string", "empty until it is generated", enum=[*FINISH_REASONS, ""]),
    }
    seconds = "seconds since the coordinator took the query up"
    later = _t(["number", "null"])
    times = {"issued_s": _t("number"), "generated_s": later, "scored_s": later, "ended_s": later}
    return {
        "Node": _object({**fields, "t_s": _t("number", seconds)}),
        "TreeNode": _object({**fields, "times": {**_object(times), "description": seconds}}),
    }


def _overview() -> Schema:
    question = _object({"query_id": _t("string"), "waiting_s": _t("number"), "events": _t("integer")})
    return _object(
        {
            "scope": _t(
                "string",
                "whose figures: everyone's (the operator's token, or no tokens at all) or the "
                "caller's own (a client's token: null where another's work would show)",
                enum=["operator", "client"],
            ),
            "in_flight": _t("integer", "questions submitted and not yet answered (a client: its own)"),
            "backlog": _t(["integer", "null"], "of those, the ones no coordinator holds"),
            "questions": _t("array", "the oldest in flight (a client: its own)", items=question),
            "window_s": _t("number", "the window the rates are over"),
            "answered": _t(["integer", "null"]),
            "answers_per_s": _t(["number", "null"]),
            "nodes_per_s": _t(["number", "null"]),
            "speculative_issued": _t(["integer", "null"]),
            "speculative_adopted": _t(["integer", "null"]),
            "hit_rate": _t(["number", "null"], "adopted / issued (null: none issued)"),
            "granted": _t(["integer", "null"], "speculative jobs the allocator grants (null: none active)"),
            "tpot_target": _t(["number", "null"], "the allocator's TPOT target"),
            "workers": _t(
                "array", "each generator's load and its governor's slack (a client: none)", items=_t("object")
            ),
            "served_by": _served("what this ingress's pipeline is configured to answer with"),
        }
    )


def _openai() -> dict[str, Schema]:
    model = _object(
        {
            "id": _t("string", "spex:<algorithm>-<target>"),
            "object": _t("string", const="model"),
            "created": _t("integer"),
            "owned_by": _t("string"),
        }
    )
    message = _object({"role": _t("string", const="user"), "content": _t(["string", "array"])})
    fields = client_fields()
    honoured = {name: _t(kind, meaning) for name, (kind, meaning) in HONOURED.items()}
    honoured["model"]["pattern"] = f"^{_unnamed(MODEL.pattern)}$"
    honoured["messages"].update(items=message, minItems=1, maxItems=1)
    honoured["stream"]["default"] = False
    honoured["n"]["enum"] = [1]
    honoured["max_tokens"]["minimum"] = honoured["max_completion_tokens"]["minimum"] = 1
    refused = {name: _refused(kind, ok, why) for name, (kind, ok, why) in NEUTRAL.items()}
    request = {**honoured, **{name: fields[name] for name in EXTRA_FIELDS}, **refused}
    completion = {
        "id": _t("string"),
        "object": _t("string", const="chat.completion"),
        "created": _t("integer"),
        "model": _t("string"),
        "choices": _t(
            "array",
            "one: the solution's steps and the answer (finish_reason length: cut at max_tokens)",
            items=_t("object"),
        ),
        "usage": _t(
            "object",
            "prompt_tokens: the question's, completion_tokens: the reply's (estimated: one per "
            f"{submission.CHARS_PER_TOKEN} characters), total_tokens: their sum",
        ),
        "spex": _t(
            "object", "the query id, the answer, the tree's size and digest, tokens_generated (the search's)"
        ),
    }
    error = {
        "message": _t("string"),
        "type": _t("string"),
        "param": _t(["string", "null"]),
        "code": _t(["string", "null"]),
    }
    return {
        "Models": _object({"object": _t("string", const="list"), "data": _t("array", items=model)}),
        "ChatRequest": {
            **_object(request, required=["model", "messages"]),
            "additionalProperties": False,
            "description": "Every parameter sent is honoured or refused with a 400 whose error.param "
            "names it (an unknown one too); null is the same as leaving it out.",
        },
        "ChatCompletion": _object(completion),
        "OpenAIError": _object({"error": _object(error)}),
    }


def _refused(kind: str | list[str], neutral: Collection[Any], why: str) -> Schema:
    """An OpenAI parameter SPEX cannot honour: refused unless at a value that asks for nothing."""
    if not neutral:
        return _t(kind, f"refused: {why}")
    unless = " or ".join(json.dumps(v) for v in neutral)
    return _t(kind, f"refused unless {unless}: {why}", enum=list(neutral))


def schemas() -> dict[str, Schema]:
    """Every schema the document's routes refer to, by name."""
    return {
        "Question": _question(),
        "QueryId": _object({"query_id": _t("string", "the question's id: where its answer is")}),
        "Status": _object({"status": _t("string")}),
        "Error": _object({"error": _t("string", "one line: the field (or part of the request) and why")}),
        "Answer": _answer(),
        **_nodes(),
        "Tree": _object(
            {
                "query_id": _t("string"),
                "status": _t("string", "searching, or what became of it"),
                "nodes": _t("array", "each node, in order of appearance", items=ref("TreeNode")),
            }
        ),
        "Overview": _overview(),
        **_openai(),
    }
