"""One submission validator, one set of defaults, for every way a question comes in."""

import pytest

from spex.proto import SubmissionError, SubmitQuestionRequest
from spex.proto.submission import ALGORITHMS, CLIENT_FIELDS, check_fields, validate
from spex.shared.core.search import SEARCHES as IMPLEMENTED


def request(**fields):
    return SubmitQuestionRequest(msg_id="m", query_id="q", **{"question": "1+1?", **fields})


def test_the_contract_names_exactly_the_algorithms_the_core_implements():
    assert set(ALGORITHMS) == set(IMPLEMENTED)


def test_defaults_come_from_the_request_struct_and_are_valid():
    req = validate(request())
    assert (req.algorithm, req.target, req.seed, req.mode) == ("rebase", 16, 0, "spex")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"question": ""}, "question"),
        ({"algorithm": "bfs"}, "algorithm"),
        ({"target": 0}, "target"),
        ({"mode": "fast"}, "mode"),
        ({"prompt_tokens": -1}, "prompt_tokens"),
        ({"question": "x" * 100_001}, "question"),
        ({"reference_answer": "1" * 1_001}, "reference_answer"),
        ({"early_stop_alpha": 0.0}, "early_stop_alpha"),
        ({"early_stop_alpha": float("nan")}, "early_stop_alpha"),
        ({"early_stop_alpha": float("inf")}, "early_stop_alpha"),
        ({"early_stop_min_answers": -1}, "early_stop_min_answers"),
        ({"early_stop_min_answers": 17}, "early_stop_min_answers"),  # more answers than the target
        ({"early_stop_weight": "max"}, "early_stop_weight"),
    ],
)
def test_a_bad_value_names_its_field(fields, field):
    with pytest.raises(SubmissionError) as err:
        validate(request(**fields))
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"question": "x", "colour": 1}, "colour: unknown field"),
        ({"question": "x", "target": "many"}, "target: expected int"),
        ({"question": "x", "target": True}, "target: expected int"),  # a bool is no int to a client
        ({"question": "x", "seed": 1.5}, "seed: expected int"),
        ({"question": 7}, "question: expected str"),
        ({"question": "x", "early_stop": 1}, "early_stop: expected bool"),
        ({"question": "x", "early_stop_alpha": "0.5"}, "early_stop_alpha: expected float"),
        ({"question": "x", "early_stop_alpha": False}, "early_stop_alpha: expected float"),
        (
            {"question": "x", "early_stop_alpha": 10**400},
            "early_stop_alpha: out of range",
        ),  # no float holds it
    ],
)
def test_a_bad_field_name_or_type_is_refused(body, message):
    with pytest.raises(SubmissionError, match=f"^{message}$"):
        check_fields(body)


def test_every_client_field_is_a_request_field():
    assert set(CLIENT_FIELDS) <= set(SubmitQuestionRequest.__struct_fields__)


def test_early_termination_is_off_by_default_and_takes_whole_numbers_for_alpha():
    assert validate(request()).early_stop is False
    fields = check_fields({"question": "x", "early_stop": True, "early_stop_alpha": 1})
    assert fields["early_stop_alpha"] == 1.0 and isinstance(fields["early_stop_alpha"], float)
    assert validate(request(**fields)).early_stop_alpha == 1.0


def test_the_answer_weights_are_the_ones_t3_knows():
    from spex.proto.messages import ANSWER_WEIGHTS
    from spex.shared.core.spec.early_stop import WEIGHTS

    assert set(ANSWER_WEIGHTS) == set(WEIGHTS)
