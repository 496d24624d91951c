"""Beam search's and DVTS's predictions on hand-built rounds: the likely survivors grown early,
each child as likely as its parent survives the cut; certain once the cut is decided."""

import itertools

import pytest

from spex.shared.core.search.base import SearchConfig
from spex.shared.core.search.beam import BeamSearch
from spex.shared.core.search.dvts import Dvts
from spex.shared.core.search.sal import survival
from spex.shared.core.tree import Tree
from tests.core.search.test_predict_hooks import View, done


def _brute_force_survival(beaten_by, scored, unscored, keep):
    """Over every order of k + u distinct scores, those where the candidate (item 0) has
    `beaten_by` of the other scored items above it: the share where fewer than `keep` items
    in all are above it."""
    items = 1 + scored + unscored
    seen = kept = 0
    for ranks in itertools.permutations(range(items)):
        above_scored = sum(1 for i in range(1, 1 + scored) if ranks[i] > ranks[0])
        if above_scored != beaten_by:
            continue
        seen += 1
        kept += sum(1 for i in range(1, items) if ranks[i] > ranks[0]) < keep
    return kept / seen


@pytest.mark.parametrize(
    ("beaten_by", "scored", "unscored", "keep"),
    [(0, 0, 3, 1), (0, 2, 2, 1), (1, 3, 3, 2), (0, 1, 5, 3), (2, 4, 2, 4), (1, 2, 0, 2), (3, 3, 3, 2)],
)
def test_survival_is_the_share_of_orders_of_exchangeable_scores_that_keep_it(
    beaten_by, scored, unscored, keep
):
    got = survival(beaten_by, scored, unscored, keep)
    assert got == pytest.approx(_brute_force_survival(beaten_by, scored, unscored, keep), abs=1e-12)


def test_beam_grows_the_likely_survivors_first_and_nothing_of_a_completed_beam():
    tree = Tree("q", seed=1, question_tokens=50)
    beam = BeamSearch(tree, SearchConfig("beam", 8, params={"beam_width": 4}))  # keeps 2, copies 4
    level = [tree.child(tree.root, i) for i in range(8)]
    beam.pending = level
    done(level[0], 0.9)
    done(level[1], 0.3)
    done(level[2], 0.95, answer="7")  # completed: set aside, never grown
    view = View(tree)
    got = beam.predict(view, k=100)
    first = [view.child(level[0], j) for j in range(4)]
    assert got[:4] == first  # the best beam's four copies, likeliest
    assert all(n.parent is not level[2] for n in got)
    assert beam.spec_likelihood(first[0]) > beam.spec_likelihood(view.child(level[1], 0))


def test_beam_is_certain_of_the_next_round_once_every_beam_is_scored():
    tree = Tree("q", seed=1, question_tokens=50)
    beam = BeamSearch(tree, SearchConfig("beam", 4, params={"beam_width": 2}))  # keeps 2
    level = [tree.child(tree.root, i) for i in range(4)]
    beam.pending = level
    for node, r in zip(level, (0.1, 0.7, 0.4, 0.7)):
        done(node, r)
    view = View(tree)
    got = beam.predict(view, k=4)
    # (1) and (3) survive (equal scores: both kept); the next list is [1, 3, 1, 3].
    assert got == [
        view.child(level[1], 0),
        view.child(level[3], 0),
        view.child(level[1], 1),
        view.child(level[3], 1),
    ]
    assert all(beam.spec_likelihood(n) == 1.0 for n in got)


def test_beam_looks_a_round_further_through_scored_speculative_children():
    tree = Tree("q", seed=1, question_tokens=50)
    beam = BeamSearch(tree, SearchConfig("beam", 2, params={"beam_width": 2}))  # keeps 1
    level = [tree.child(tree.root, i) for i in range(2)]
    beam.pending = level
    done(level[0], 0.9)
    done(level[1], 0.1)
    view = View(tree)
    kids = [view.child(level[0], j) for j in range(2)]
    for kid, r in zip(kids, (0.8, 0.2)):
        done(kid, r)
    got = beam.predict(view, k=10)
    assert got[:2] == [view.child(kids[0], 0), view.child(kids[0], 1)]


def test_dvts_is_certain_of_a_decided_subtree_and_stops_at_an_answer():
    tree = Tree("q", seed=1, question_tokens=50)
    dvts = Dvts(tree, SearchConfig("dvts", 8))  # two subtrees of four
    groups = [[tree.child(tree.root, t * 4 + j) for j in range(4)] for t in range(2)]
    dvts.groups, dvts.pending = groups, [c for g in groups for c in g]
    for node, r in zip(groups[0], (0.2, 0.9, 0.9, 0.4)):
        done(node, r)
    done(groups[1][0], 0.99, answer="3")  # the likely choice of subtree 1 ends it
    view = View(tree)
    got = dvts.predict(view, k=100)
    chosen = groups[0][1]  # the first of the two best
    assert got[:4] == [view.child(chosen, j) for j in range(4)]
    assert all(dvts.spec_likelihood(n) == 1.0 for n in got[:4])
    assert all(n.parent is not groups[0][2] for n in got)
    assert all(n.parent is not groups[1][0] for n in got)


@pytest.mark.parametrize("search", ["beam", "dvts"])
def test_a_prediction_dies_once_its_round_is_decided(search):
    tree = Tree("q", seed=1, question_tokens=50)
    algo = (
        BeamSearch(tree, SearchConfig("beam", 4)) if search == "beam" else Dvts(tree, SearchConfig("dvts", 4))
    )
    level = [tree.child(tree.root, i) for i in range(4)]
    algo.pending = level
    view = View(tree)
    ahead = view.child(level[0], 0)
    assert algo.spec_alive(ahead)
    algo.pending = [tree.child(level[1], 0)]  # the round decided: level[0] was not kept
    assert not algo.spec_alive(ahead)
