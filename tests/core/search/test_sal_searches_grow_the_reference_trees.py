"""Beam search, DVTS and best-of-N grow the trees search-and-learn's loops give, and keep the
solutions they keep: checked against those loops written again (`sal_reference`), on content
with few reward values (ties everywhere) and few texts (duplicates), and on hand-built cases
for the ties and the duplication rule."""

import pytest

from spex.shared.core.search.beam import keep_best
from spex.shared.core.search.dvts import first_best
from tests.core.search.sal_reference import (
    Content,
    grow_by_content,
    grown,
    reference_beam_search,
    reference_dvts,
    to_the_end,
)

BEAM_CASES = [
    # (N, M, iterations, params)
    (8, 2, 6, {}),
    (16, 4, 8, {}),
    (6, 4, 5, {}),  # one beam kept, copied 6 times
    (5, 2, 6, {}),  # two kept, copied 3 and 2 times
    (8, 4, 3, {}),  # the last round generates to the end early
    (8, 2, 6, {"agg_strategy": "min"}),
    (8, 2, 6, {"agg_strategy": "prod"}),
    (8, 2, 6, {"filter_duplicates": 1}),
    (8, 2, 6, {"sort_completed": 1, "agg_strategy": "min"}),
    (4, 4, 2, {"max_tokens": 150}),
]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("n", "m", "iterations", "params"), BEAM_CASES)
def test_beam_search_grows_the_reference_tree_and_keeps_its_completed_beams(seed, n, m, iterations, params):
    content = Content(seed)
    tree, solutions, _ = grow_by_content(
        "beam", n, content, beam_width=m, num_iterations=iterations, **params
    )
    ref_grown, ref_completed = reference_beam_search(
        n,
        m,
        iterations,
        content,
        agg=params.get("agg_strategy", "last"),
        filter_duplicates=bool(params.get("filter_duplicates")),
        sort_completed=bool(params.get("sort_completed")),
        max_tokens=params.get("max_tokens", 2048),
    )
    assert grown(tree) == ref_grown
    assert solutions == ref_completed


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(
    ("n", "m", "iterations", "agg"), [(8, 4, 6, "last"), (16, 4, 8, "min"), (6, 2, 4, "prod")]
)
def test_dvts_grows_the_reference_subtrees_and_returns_their_last_candidates(seed, n, m, iterations, agg):
    content = Content(seed, terminal=0.1)
    tree, solutions, _ = grow_by_content(
        "dvts", n, content, beam_width=m, num_iterations=iterations, agg_strategy=agg
    )
    ref_grown, ref_out = reference_dvts(n, m, iterations, content, agg)
    assert grown(tree) == ref_grown
    assert solutions == ref_out


@pytest.mark.parametrize("order_seed", range(4))
@pytest.mark.parametrize("seed", range(8))
def test_best_of_n_runs_n_chains_to_their_ends_whatever_order_their_steps_come_in(seed, order_seed):
    content = Content(seed, terminal=0.1)
    tree, solutions, _ = grow_by_content("best_of_n", 6, content, order_seed=order_seed, max_tokens=400)
    ends = [to_the_end((i,), content, 400) for i in range(6)]
    assert solutions == ends
    assert grown(tree) == sorted({end[:j] for end in ends for j in range(1, len(end) + 1)})


def test_ties_keep_the_later_beams_as_numpy_s_argsort_does():
    assert keep_best([0.5, 0.5, 0.5, 0.5], 2) == [2, 3]
    assert keep_best([0.9, 0.5, 0.5, 0.1], 2) == [0, 2]
    assert keep_best([0.1, 0.2], 0) == []
    assert first_best([0.5, 0.8, 0.8]) == 1  # np.argmax: the first of equal ones


class Flat(Content):
    """Every step scores alike; the steps `ends` lists give an answer."""

    def __init__(self, ends=()):
        super().__init__(0)
        self.ends = set(ends)

    def step(self, path):
        answer = "4" if path in self.ends else None
        return f"s{path}" + (" The answer is 4." if answer else ""), 30, answer, 0.5


def test_equal_scores_keep_the_last_beams_and_copy_them_in_turn():
    # N = 4, M = 2: two of four kept, the later two on a tie; each then grows twice, in the
    # list's order [b2, b3, b2, b3]: b2's children 0 and 1, b3's children 0 and 1.
    tree, _, _ = grow_by_content("beam", 4, Flat(), beam_width=2, num_iterations=3)
    depth2 = [p for p in grown(tree) if len(p) == 2]
    assert depth2 == [(2, 0), (2, 1), (3, 0), (3, 1)]


def test_fewer_active_beams_than_kept_are_duplicated_up_to_n():
    # Three of four answer at once: the one left is copied four times (its children 0..3).
    tree, solutions, _ = grow_by_content(
        "beam",
        4,
        Flat(ends={(0,), (1,), (2,), (3, 0), (3, 1), (3, 2), (3, 3)}),
        beam_width=2,
        num_iterations=5,
    )
    assert [p for p in grown(tree) if len(p) == 2] == [(3, 0), (3, 1), (3, 2), (3, 3)]
    assert solutions == [(0,), (1,), (2,), (3, 0)]  # the first N completed


def test_too_few_completed_beams_are_repeated_to_n():
    tree, solutions, _ = grow_by_content(
        "beam", 4, Flat(ends={(3,), (0, 0)}), beam_width=4, num_iterations=2, max_tokens=30
    )
    # Round 1: (3,) answers; (0,) ... (2,) score alike, (2,) kept (the last), copied 4 times; the
    # last round takes each copy to its end within 30 tokens: one step each.
    assert solutions == [(3,), (2, 0), (2, 1), (2, 2)]


@pytest.mark.parametrize(
    ("algorithm", "target", "params", "problem"),
    [
        ("beam", 2, {}, "at least beam_width"),
        ("dvts", 6, {}, "multiple of beam_width"),
        ("beam", 16, {"agg_strategy": "mean"}, "agg_strategy"),
        ("dvts", 16, {"beam_width": 0}, "at least 1"),
        ("best_of_n", 4, {"beam_width": 4}, "unknown parameter 'beam_width'"),
        ("beam", 16, {"beam_width": 2.5}, "whole number"),
        ("beam", 16, {"filter_duplicates": 2}, "a flag is 0 or 1"),
        ("beam", 16, {"agg_strategy": 1.0}, "expected text"),
    ],
)
def test_bad_parameters_are_refused_by_name(algorithm, target, params, problem):
    from spex.shared.core.search.base import SearchConfig, make_algorithm
    from spex.shared.core.tree import Tree

    with pytest.raises(ValueError, match=problem):
        make_algorithm(Tree("q", 0, 1), SearchConfig(algorithm, target, params=params))
