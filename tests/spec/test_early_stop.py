"""T3 stops exactly when c1 − c2 > α · (N − n) · avg(w_2nd) and n ≥ t."""

import pytest

from spex.shared.core.spec.early_stop import EarlyStop, should_stop
from tests.factories import answer_nodes


def answers(*pairs):
    return answer_nodes(pairs)


ON = EarlyStop(enabled=True, alpha=0.5, min_answers=2)


def test_stops_when_the_lead_cannot_be_overturned():
    # c1 = 2.4, c2 = 0.4, avg(w2) = 0.4; N − n = 6: margin 2.0 > 0.5·6·0.4 = 1.2 -> stop.
    got = answers(("7", 0.8), ("7", 0.8), ("7", 0.8), ("9", 0.4))
    assert should_stop(got, 10, ON) == "7"


def test_does_not_stop_when_the_runner_up_could_still_win():
    # c1 = 1.6, c2 = 0.4; N − n = 13: 1.2 > 0.5·13·0.4 = 2.6 is false.
    got = answers(("7", 0.8), ("7", 0.8), ("9", 0.4))
    assert should_stop(got, 16, ON) is None


def test_boundary_is_strict():
    # c1 − c2 = 1.0 exactly; α·(N − n)·avg = 0.5·4·0.5 = 1.0 -> not strictly greater.
    got = answers(("7", 0.75), ("7", 0.75), ("9", 0.5))
    assert should_stop(got, 7, ON) is None
    assert should_stop(got, 6, ON) == "7"  # 1.0 > 0.5·3·0.5 = 0.75


def test_needs_t_answers():
    got = answers(("7", 0.9), ("7", 0.9))
    assert should_stop(got, 2, EarlyStop(enabled=True, min_answers=3)) is None
    assert should_stop(got, 2, EarlyStop(enabled=True, min_answers=2)) == "7"


def test_default_t_is_a_quarter_of_the_target():
    assert EarlyStop(enabled=True).threshold(16) == 4
    assert EarlyStop(enabled=True).threshold(5) == 2


def test_without_runner_up_the_mean_weight_of_all_answers_is_used():
    # One group: c1 = 1.8, c2 = 0, avg = 0.6; N − n = 4: 1.8 > 0.5·4·0.6 = 1.2 -> stop.
    got = answers(("x", 0.6), ("x", 0.6), ("x", 0.6))
    assert should_stop(got, 7, ON) == "x"
    assert should_stop(got, 10, ON) is None  # 1.8 > 0.5·7·0.6 = 2.1 is false


def test_equivalent_answers_are_one_group():
    got = answers(("\\frac{1}{2}", 0.9), ("\\dfrac{1}{2}", 0.9), ("3", 0.1))
    assert should_stop(got, 4, ON) == "\\frac{1}{2}"


@pytest.mark.parametrize(("gate", "stops"), [(None, True), (0.5, True), (0.95, False)])
def test_optional_median_gate(gate, stops):
    got = answers(("7", 0.9), ("7", 0.9), ("7", 0.9))
    rule = EarlyStop(enabled=True, alpha=0.5, min_answers=2, median_gate=gate)
    assert (should_stop(got, 4, rule) is not None) == stops
