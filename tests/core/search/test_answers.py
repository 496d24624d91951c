"""Final-answer selection and extraction."""

import pytest

from spex.shared.core.search.answers import extract_answer, normalize_answer, select_answer
from tests.factories import answer_nodes as solutions

SOLS = [("4", 0.3), ("4", 0.3), ("4", 0.2), ("5", 0.9), ("5", 0.8), ("6", 0.95)]


def test_majority_counts_votes():
    assert select_answer(solutions(SOLS), "majority") == "4"


def test_weighted_sums_last_step_rewards():
    assert select_answer(solutions(SOLS), "weighted") == "5"  # 1.7 > 0.95 > 0.8


def test_best_of_n_takes_the_single_best():
    assert select_answer(solutions(SOLS), "best") == "6"


def test_a_search_s_own_weight_replaces_the_last_step_reward_and_a_repeated_solution_votes_twice():
    sols = solutions(SOLS)
    inverse = {id(n): 1.0 - n.reward for n in sols}  # a path score that ranks them the other way
    assert select_answer(sols, "best", weight=lambda n: inverse[id(n)]) == "4"
    assert select_answer(sols, "weighted", weight=lambda n: inverse[id(n)]) == "4"
    assert select_answer([*sols, sols[5], sols[5], sols[5]], "majority") == "6"  # 4 votes to 3


def test_equivalent_latex_answers_vote_together():
    sols = solutions([("\\frac{1}{2}", 0.5), ("\\dfrac{1}{2}", 0.5), ("3", 0.9)])
    assert normalize_answer(select_answer(sols, "weighted")) == "\\frac{1}{2}"


def test_no_answers_gives_none_and_bad_method_fails():
    assert select_answer([], "majority") is None
    with pytest.raises(ValueError, match="answer selection"):
        select_answer([], "median")


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Step 3: so x = 2. The answer is 2", "2"),
        ("The answer is: \\boxed{\\frac{1}{2}} ки", "\\frac{1}{2}"),
        ("Therefore, the final answer is 17.", "17"),
        ("Step 1: keep going.", None),
        # "The answer is" ends with its sentence, not the step
        ("The answer is 25. Now you have two apples.", "25"),
        ("The answer is 3.5.", "3.5"),
        ("The answer is: 42 ки", "42"),
        ("the answer is $\\frac{1}{2}$.\nThen more text", "$\\frac{1}{2}$"),
        # placeholders and empty boxes are not answers; an earlier real box still is
        ("Write the final answer as \\boxed{answer}.", None),
        ("So \\boxed{} it is.", None),
        ("\\boxed{\\text{your answer}}", None),
        ("\\boxed{7}, the format being \\boxed{answer}", "7"),
        ("The answer is answer.", None),
        # a number that "is the answer", as SmolLM2 ends a solution; nothing else that is
        ("So 7 is the answer.", "7"),
        ("The sum is the answer.", None),
        # an expression's result, without its unit
        ("The answer is 2 * 7 = 14 cards.", "14"),
        ("The answer is 28 cards.", "28"),
        ("The answer is x = 5.", "5"),
        ("The answer is 3 apples and 2 pears.", "3 apples and 2 pears"),
    ],
)
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer
