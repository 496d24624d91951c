"""The OpenAPI document's schemas say what the ingress takes and answers: a question's body is
the contract's client fields with their types and defaults, its bounds are the ones the
validator holds them to, an answer, a node and a tree's node as the ingress writes them are
valid by their schemas (with no property left undocumented), and a chat request's parameters
are the ones the OpenAI endpoint reads. No server."""

import msgspec
import pytest

from spex.proto import AnswerResult, NodeEvent, ServedBy, SubmissionError, SubmitQuestionRequest, submission
from spex.services.ingress.openai_params import EXTRA_FIELDS, HONOURED, NEUTRAL, ParamError, chat_ask
from spex.services.ingress.openapi import document
from spex.services.ingress.openapi_schemas import BOUNDS, SHAPES
from spex.services.ingress.service import OPEN_PATHS
from spex.services.ingress.watch import answer_json
from spex.shared.runtime.views import fold_tree, node_json, twin_json

TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}
ENVELOPE = {"msg_id": "m", "query_id": "q"}


def schema(name):
    return document(OPEN_PATHS)["components"]["schemas"][name]


def check(instance, name):
    """`instance` is valid by the schema `name`, and holds no property it leaves out."""
    jsonschema = pytest.importorskip("jsonschema")
    doc = document(OPEN_PATHS)
    jsonschema.validate(instance, {"$ref": f"#/components/schemas/{name}", "components": doc["components"]})
    assert set(instance) <= set(doc["components"]["schemas"][name]["properties"]), name


def test_a_question_s_body_is_the_contract_s_client_fields():
    body = schema("Question")
    defaults = {
        f.name: f.default if f.default_factory is msgspec.NODEFAULT else f.default_factory()
        for f in msgspec.structs.fields(SubmitQuestionRequest)
    }
    assert list(body["properties"]) == list(submission.CLIENT_FIELDS)
    assert body["required"] == ["question"] and body["additionalProperties"] is False
    for name, kind in submission.CLIENT_FIELDS.items():
        field = body["properties"][name]
        assert field["type"] == TYPES[kind] and field["description"], name
        assert field.get("default", msgspec.NODEFAULT) == defaults[name], name
    assert body["properties"]["algorithm"]["pattern"] == f"^{submission.SEARCH_NAME.pattern}$"
    assert body["properties"]["mode"]["enum"] == list(submission.MODES)
    assert body["properties"]["answer_selection"]["enum"] == ["", "majority", "weighted", "best"]


def test_the_shape_of_a_search_s_name_and_parameters_is_the_validator_s():
    submission.validate(_request("algorithm", "a" + "_9" * 19 + "z"))  # 40 characters
    for bad in ("a" * 41, "Rebase", "9a", "rebase-16"):
        _refused("algorithm", bad)
    most, chars = SHAPES["params"]["maxProperties"], SHAPES["params"]["additionalProperties"]["maxLength"]
    submission.validate(_request("params", {f"p{i}": 1.0 for i in range(most)}))
    _refused("params", {f"p{i}": 1.0 for i in range(most + 1)})
    submission.validate(_request("params", {"p": "x" * chars}))
    _refused("params", {"p": "x" * (chars + 1)})


def _request(name, value):
    return SubmitQuestionRequest(**ENVELOPE, **{"question": "x", "target": 16, name: value})


def _refused(name, value):
    with pytest.raises(SubmissionError) as refusal:
        submission.validate(_request(name, value))
    assert refusal.value.field == name


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_a_documented_bound_is_the_validator_s(name):
    kind = submission.CLIENT_FIELDS[name]
    for bound, at in BOUNDS[name].items():
        if bound == "minLength":
            submission.validate(_request(name, "x" * at))
            _refused(name, "x" * (at - 1))
        elif bound == "maxLength":
            submission.validate(_request(name, "x" * at))
            _refused(name, "x" * (at + 1))
        elif bound == "minimum":
            submission.validate(_request(name, kind(at)))
            _refused(name, kind(at - 1))
        elif bound == "maximum":
            submission.validate(_request(name, kind(at)))
            _refused(name, kind(at + 1))
        elif bound == "exclusiveMinimum":
            submission.validate(_request(name, kind(at) + 0.001))
            _refused(name, kind(at))
        else:
            raise AssertionError(f"{name}: a bound this test does not know: {bound}")


def test_an_answer_a_node_and_a_tree_are_what_their_schemas_say():
    served = ServedBy("sim", "", "synthetic", "prm")
    answered = AnswerResult(
        **ENVELOPE, answer="4", correct=True, solution=["2+2", "4"], nodes=3, served_by=served
    )
    failed = AnswerResult(**ENVELOPE, answer=None, error="a job failed")
    for answer in (answered, failed):
        check(answer_json(answer), "Answer")
    for twin in (None, answered, failed):  # searching, the same tree, one failed
        check(answer_json(answered) | {"baseline_twin": twin_json("q.baseline", answered, twin)}, "Answer")
    assert twin_json("q.baseline", answered, answered)["lossless"] is True
    assert twin_json("q.baseline", answered, failed)["lossless"] is None
    assert set(answer_json(failed)) | {"baseline_twin"} == set(schema("Answer")["properties"])
    events = [
        NodeEvent(**ENVELOPE, node_id="n0", state="root", t_s=0.0),
        NodeEvent(**ENVELOPE, node_id="n1", parent_id="n0", state="primary", index=0, running=True, t_s=0.1),
        NodeEvent(**ENVELOPE, node_id="n1", parent_id="n0", state="primary", generated=True, text="a",
                  tokens=3, reward=0.5, finish_reason="stop", answer="4", t_s=0.2),
    ]  # fmt: skip
    for event in events:
        check(node_json(event), "Node")
        assert set(node_json(event)) == set(schema("Node")["properties"])
    for node in fold_tree(events):
        check(node, "TreeNode")
        assert set(node) == set(schema("TreeNode")["properties"])
    check({"query_id": "q", "status": "searching", "nodes": fold_tree(events)}, "Tree")


def test_a_chat_request_s_documented_parameters_are_the_ones_the_endpoint_reads():
    body = schema("ChatRequest")
    assert set(body["properties"]) == {*HONOURED, *NEUTRAL, *EXTRA_FIELDS}
    assert body["additionalProperties"] is False
    ask = {"model": "spex:rebase-4", "messages": [{"role": "user", "content": "x"}]}
    for name, prop in body["properties"].items():
        for value in prop.get("enum", ()):  # a documented neutral value is accepted
            chat_ask({**ask, name: value}, temperature=0.3, searches=["rebase"])
    with pytest.raises(ParamError) as refusal:
        chat_ask({**ask, "undocumented": 1}, temperature=0.3, searches=["rebase"])
    assert refusal.value.field == "undocumented"
    # A system message before the question is the question's own system prompt.
    system = {"role": "system", "content": [{"type": "text", "text": "Be terse."}]}
    asked = chat_ask({**ask, "messages": [system, *ask["messages"]]}, temperature=0.3, searches=["rebase"])
    assert asked.question == "x" and asked.fields["system_prompt"] == "Be terse."
