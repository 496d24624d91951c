"""The grader on answer forms taken from MATH-500: equal meanings pass, different ones fail."""

import pytest

from spex.shared.content.grading import grade
from spex.shared.core.search.answers import extract_answer

# (MATH-500 reference, an equivalent answer as a model may write it inside \boxed{})
EQUIVALENT = [
    (r"\frac{14}{3}", r"\frac{14}{3}"),
    (r"\frac{3}{2}", "1.5"),  # fraction vs decimal
    ("1.25", r"\frac{5}{4}"),  # decimal vs fraction
    ("0.15", r"\frac{3}{20}"),
    (r"\dfrac{17}{50}", r"\frac{17}{50}"),  # \dfrac vs \frac
    (r"\frac43", r"\frac{4}{3}"),  # braceless \frac
    (r"\frac 59", r"\frac{5}{9}"),
    (r"\frac65", "1.2"),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})"),  # tuples, \left/\right
    (r"\left( \frac{3}{2}, -13 \right)", "(1.5, -13)"),
    ("(6,31,-1)", "(6, 31, -1)"),
    ("(-2,1)", "(-2, 1)"),
    ("(3,4]", "(3, 4]"),  # half-open interval
    (r"(2,\infty)", r"(2, \infty)"),
    (r"\left(\frac{3}{5},\frac{8}{3}\right]", r"(\frac{3}{5}, \frac{8}{3}]"),
    ("90^\\circ", "90"),  # degrees
    ("145^\\circ", "145^{\\circ}"),
    (r"\frac{270}7\text{ degrees}", r"\frac{270}{7}"),  # units
    (r"3\sqrt{13}", r"\sqrt{117}"),  # symbolic equivalence
    (r"11\sqrt2", r"11\sqrt{2}"),
    (r"70 \sqrt{2}", r"70\sqrt{2}"),
    (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}"),
    (r"-\frac{\pi}{6}", r"-\pi/6"),
    (r"288 \pi", r"288\pi"),
    (r"18+2\pi", r"2\pi+18"),
    (r"10,\!080", "10080"),  # thousands separators
    (r"11,\! 111,\! 111,\! 100", "11111111100"),
    (".0000672", r"6.72\times10^{-5}"),
    ("3, 5, 7", "3,5,7"),  # a list of values
    (r"1 \pm \sqrt{19}", r"1\pm\sqrt{19}"),
    (r"\text{Evelyn}", "Evelyn"),  # words
    (r"\text{(C)}", r"\text{(C)}"),  # multiple choice
    (r"1\frac{4}{5}", r"\frac{9}{5}"),  # mixed number
    (r"\frac{3\sqrt{3}}{4}", r"\frac{3}{4}\sqrt{3}"),
]

DIFFERENT = [
    (r"\frac{14}{3}", r"\frac{3}{14}"),
    ("(3,4]", "[3,4]"),  # an interval's ends matter
    ("(-2,1)", "(1,-2)"),  # a tuple's order matters
    ("90^\\circ", "45"),
    (r"3\sqrt{13}", r"\sqrt{39}"),
    (r"\text{east}", r"\text{west}"),
    ("1.25", "1.2"),
]


@pytest.mark.parametrize(("reference", "answer"), EQUIVALENT)
def test_equivalent_answers_pass(reference, answer):
    assert grade(answer, reference)


@pytest.mark.parametrize(("reference", "answer"), DIFFERENT)
def test_different_answers_fail(reference, answer):
    assert not grade(answer, reference)


def test_no_answer_is_wrong():
    assert not grade(None, "4") and not grade("  ", "4")


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (r"So the total is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (
            r"First \boxed{3}, corrected: \boxed{\left( 3, \frac{\pi}{2} \right)}",
            r"\left( 3, \frac{\pi}{2} \right)",
        ),
        (r"Thus \boxed{\{1, 2\}} is the set.", r"\{1, 2\}"),  # nested and escaped braces
        (r"\boxed{x^{2^{3}}}", "x^{2^{3}}"),
        (r"\boxed{unclosed", None),
        ("The answer is 42", "42"),  # the synthetic workload's form
        ("No answer here.", None),
    ],
)
def test_the_last_boxed_answer_is_extracted(text, answer):
    assert extract_answer(text) == answer


def test_grading_an_extracted_answer_end_to_end():
    assert grade(extract_answer(r"Adding gives $\dfrac{6}{4}$, so \boxed{\dfrac{3}{2}}."), "1.5")


def test_votes_go_by_meaning_with_math_verify_s_equivalence():
    """`0.5`, `\\frac12` and `1/2` are one answer to vote for; by spelling alone they are three
    and lose to `3`."""
    from spex.shared.content.grading import equivalent
    from spex.shared.core.search.answers import select_answer
    from spex.shared.core.spec.early_stop import EarlyStop, should_stop
    from tests.factories import answer_nodes

    sols = answer_nodes([("0.5", 0.4), ("\\frac12", 0.4), ("1/2", 0.4), ("3", 0.5), ("3", 0.5)])
    assert select_answer(sols, "majority") == "3"
    assert select_answer(sols, "majority", equivalent) == "0.5"  # named by its first spelling
    assert select_answer(sols, "weighted", equivalent) == "0.5"  # 1.2 > 1.0
    rule = EarlyStop(enabled=True, alpha=0.0, min_answers=1)
    assert should_stop(sols, 8, rule, same=equivalent) == "0.5"
    assert should_stop(sols, 8, rule) == "3"


def test_equivalence_is_cached_and_symmetric():
    from spex.shared.content import grading

    grading._equivalent.cache_clear()
    assert grading.equivalent("\\frac{1}{2}", "0.5") and grading.equivalent("0.5", "\\frac{1}{2}")
    assert not grading.equivalent("0.5", "2")
    info = grading._equivalent.cache_info()
    assert info.misses == 2 and info.hits == 1  # the second order was the first pair again
    assert grading.equivalent(" 7 ", "7")  # same spelling: no math-verify at all
