"""One submission validator, one set of defaults, for every way a question comes in."""

import pytest

from spex.proto import SubmissionError, SubmitQuestionRequest
from spex.proto.submission import CLIENT_FIELDS, Limits, check_fields, validate


def request(**fields):
    return SubmitQuestionRequest(msg_id="m", query_id="q", **{"question": "1+1?", **fields})


def _takes_width(target, params):
    if set(params) - {"width"}:
        raise ValueError(f"unknown parameter {sorted(set(params) - {'width'})[0]!r}")
    if params.get("width", 1) > target:
        raise ValueError("width: at most the target")


SERVED = Limits(searches={"rebase": _takes_width, "beam": _takes_width})


def test_a_search_the_services_do_not_serve_is_refused_naming_those_they_do():
    with pytest.raises(SubmissionError, match=r"^algorithm: unknown 'greedy'; known: beam, rebase$"):
        validate(request(algorithm="greedy"), SERVED)
    assert validate(request(algorithm="beam"), SERVED).algorithm == "beam"


def test_without_the_services_searches_any_well_formed_name_passes():
    assert validate(request(algorithm="my_search2")).algorithm == "my_search2"
    for bad in ("", "Beam", "2beam", "beam-16", "b" * 41):
        with pytest.raises(SubmissionError, match="^algorithm: "):
            validate(request(algorithm=bad))


def test_the_search_checks_its_own_parameters():
    assert validate(request(params={"width": 4.0}), SERVED).params == {"width": 4.0}
    with pytest.raises(SubmissionError, match=r"^params: rebase: width: at most the target$"):
        validate(request(target=2, params={"width": 4.0}), SERVED)
    with pytest.raises(SubmissionError, match=r"^params: rebase: unknown parameter 'depth'$"):
        validate(request(params={"depth": 3.0}), SERVED)


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({f"p{i}": 1.0 for i in range(33)}, "at most 32 parameters"),
        ({"x" * 101: 1.0}, "a parameter's name is 1 to 100 characters of text"),
        ({"\udc80": 1.0}, "a parameter's name is 1 to 100 characters of text"),
        ({"agg": "\udc80"}, "agg: at most 100 characters of Unicode text"),
        ({"agg": "m" * 101}, "agg: at most 100 characters of Unicode text"),
        ({"w": float("nan")}, "w: must be finite"),
    ],
)
def test_parameters_are_bounded_whatever_the_search(params, problem):
    with pytest.raises(SubmissionError, match=f"^params: {problem}"):
        validate(request(params=params))


def test_a_parameter_is_a_number_or_text_and_the_selection_one_of_three():
    assert check_fields({"question": "x", "params": {"beam_width": 4, "agg_strategy": "min"}})["params"] == {
        "beam_width": 4.0,
        "agg_strategy": "min",
    }
    for bad in ({"beam_width": True}, {"beam_width": [4]}, {"beam_width": None}):
        with pytest.raises(SubmissionError, match="^params: beam_width: expected a number or text$"):
            check_fields({"question": "x", "params": bad})
    with pytest.raises(SubmissionError, match="^params: expected dict$"):
        check_fields({"question": "x", "params": [1]})
    assert validate(request(answer_selection="majority")).answer_selection == "majority"
    with pytest.raises(SubmissionError, match="^answer_selection: "):
        validate(request(answer_selection="vote"))


def test_defaults_come_from_the_request_struct_and_are_valid():
    req = validate(request())
    assert (req.algorithm, req.target, req.seed, req.mode) == ("rebase", 16, 0, "spex")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"question": ""}, "question"),
        ({"algorithm": "BFS"}, "algorithm"),
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
