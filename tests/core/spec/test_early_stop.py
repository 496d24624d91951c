"""T3 stops exactly when c1 − c2 > α · (N − n) · avg(w_2nd) once the search has gone far
enough — as the artifact runs it (min-over-path weights, > N/4 answers for BFS, > half the
rollouts for DFS, no runner-up → 0), and as the project's earlier variant."""

import pytest

from spex.shared.core.spec.early_stop import EarlyStop, answer_weight, should_stop
from spex.shared.core.tree import Tree
from tests.factories import answer_nodes


def answers(*pairs):
    return answer_nodes(pairs)


ON = EarlyStop(enabled=True, alpha=0.5, min_answers=2)
PROJECT = EarlyStop.project()


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


def test_artifact_thresholds_bfs_more_than_a_quarter_dfs_more_than_half_the_rollouts():
    rule = EarlyStop(enabled=True)
    got = answers(*[("7", 0.9)] * 4)
    assert should_stop(got, 16, rule, "bfs") is None  # 4 answers: not more than 16/4
    assert should_stop([*got, *answers(("7", 0.9))], 16, rule, "bfs") == "7"
    assert should_stop(got, 10, rule, "dfs", rollouts_done=5) is None  # not more than 10/2
    assert should_stop(got, 10, rule, "dfs", rollouts_done=6) == "7"
    assert should_stop(answers(("7", 0.9)), 10, rule, "dfs", rollouts_done=6) == "7"  # answers don't count


def test_project_threshold_is_a_quarter_of_the_target_in_answers_for_every_search():
    got = answers(*[("x", 0.9)] * 4)
    assert should_stop(got[:3], 16, PROJECT, "bfs") is None
    assert PROJECT.far_enough("dfs", 4, 1, 16) and not PROJECT.far_enough("bfs", 3, None, 16)
    assert PROJECT.far_enough("bfs", 2, None, 5) and not PROJECT.far_enough("bfs", 1, None, 5)


def test_without_runner_up_the_artifact_uses_zero_and_the_project_the_leaders_mean():
    # One group: c1 = 1.8, c2 = 0. Project: avg = 0.6; N − n = 7: 1.8 > 0.5·7·0.6 = 2.1 is false.
    got = answers(("x", 0.6), ("x", 0.6), ("x", 0.6))
    assert should_stop(got, 10, PROJECT) is None
    assert should_stop(got, 7, PROJECT) == "x"  # 1.8 > 0.5·4·0.6 = 1.2
    assert should_stop(got, 10, ON) == "x"  # artifact: 1.8 > 0 — one answer group stops at once


def test_weight_is_the_lowest_step_reward_on_the_path_and_waits_for_every_step():
    tree = Tree("q", seed=0, question_tokens=1)
    a = tree.child(tree.root, 0)
    b = tree.child(a, 0)
    b.answer, b.reward = "7", 0.9
    assert answer_weight(b, "last") == 0.9
    assert answer_weight(b, "min") is None  # a's score is not in yet
    a.reward = 0.3
    assert answer_weight(b, "min") == 0.3
    assert should_stop([b], 1, EarlyStop(enabled=True, min_answers=1)) == "7"


def test_bad_variant_names_are_refused_by_field():
    with pytest.raises(ValueError, match="weight"):
        EarlyStop(weight="mean")
    with pytest.raises(ValueError, match="runner_up"):
        EarlyStop(runner_up="none")


def test_equivalent_answers_are_one_group():
    got = answers(("\\frac{1}{2}", 0.9), ("\\dfrac{1}{2}", 0.9), ("3", 0.1))
    assert should_stop(got, 4, ON) == "\\frac{1}{2}"


@pytest.mark.parametrize(("gate", "stops"), [(None, True), (0.5, True), (0.95, False)])
def test_optional_median_gate(gate, stops):
    got = answers(("7", 0.9), ("7", 0.9), ("7", 0.9))
    rule = EarlyStop(enabled=True, alpha=0.5, min_answers=2, median_gate=gate)
    assert (should_stop(got, 4, rule) is not None) == stops
