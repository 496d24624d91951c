"""UCT choices against hand-computed cases."""

import math

import pytest

from spex.shared.core.search.base import SearchConfig
from spex.shared.core.search.mcts import uct_rest, uct_rstar
from spex.shared.core.search.rest import Rest
from spex.shared.core.search.rstar import Rstar
from spex.shared.core.tree import Tree


def test_rstar_uct_formula_by_hand():
    # Q/N + c·sqrt(ln N_parent / N) with c = 2, N_parent = 10.
    assert uct_rstar(3.0, 4, 10, 2.0) == pytest.approx(0.75 + 2 * math.sqrt(math.log(10) / 4))
    assert uct_rstar(3.0, 4, 10, 2.0) == pytest.approx(2.267428, abs=1e-6)
    assert uct_rstar(1.0, 1, 10, 2.0) == pytest.approx(4.034854, abs=1e-6)
    assert uct_rstar(0.0, 0, 10, 2.0) == 999.0


def _fully_expanded_root(algo_cls, stats, **params):
    tree = Tree("q", seed=1, question_tokens=10)
    algo = algo_cls(tree, SearchConfig(algorithm=algo_cls.name, target=1, params=params))
    kids = [tree.child(tree.root, i) for i in range(len(stats))]
    for kid in kids:
        kid.generated = True
    return tree, algo, kids


def test_rstar_picks_the_highest_uct_child():
    # Parent N = 10. (Q, N): a = (3, 4) -> 2.2674; b = (1, 1) -> 4.0349; c = (2, 5) -> 1.7572.
    stats = [(3.0, 4), (1.0, 1), (2.0, 5)]
    tree, algo, kids = _fully_expanded_root(Rstar, stats)
    algo.visits[tree.root.id] = 10
    for kid, (q, n) in zip(kids, stats):
        algo.value[kid.id], algo.visits[kid.id] = q, n
    assert algo.select(tree.root, 0, kids, algo.visits, algo.value) is kids[1]


def test_rstar_exploits_when_exploration_is_small():
    # c = 0.1: a = 0.75 + 0.1·0.7587 = 0.826; b = 0.2 + 0.1·1.5174 = 0.352; c = 0.4 + 0.068 = 0.468.
    stats = [(3.0, 4), (0.2, 1), (2.0, 5)]
    tree, algo, kids = _fully_expanded_root(Rstar, stats, exploration=0.1)
    algo.visits[tree.root.id] = 10
    for kid, (q, n) in zip(kids, stats):
        algo.value[kid.id], algo.visits[kid.id] = q, n
    assert algo.select(tree.root, 0, kids, algo.visits, algo.value) is kids[0]


def test_rstar_tries_unvisited_children_first_uniformly_at_random():
    stats = [(3.0, 4), (0.0, 0), (0.0, 0), (0.0, 0)]
    tree, algo, kids = _fully_expanded_root(Rstar, stats)
    algo.visits[tree.root.id] = 4
    algo.value[kids[0].id], algo.visits[kids[0].id] = 3.0, 4
    picks = {algo.select(tree.root, r, kids, algo.visits, algo.value).index for r in range(40)}
    assert picks == {1, 2, 3}  # every unvisited child, drawn by rollout; never the visited one


def test_rest_score_by_hand():
    # V + c·sqrt(2·ln N_parent / N): 0.5 + 0.4·sqrt(2·ln 9 / 3) = 0.5 + 0.4·1.210296 = 0.984118.
    assert uct_rest(0.5, 3, 9, 0.4, 0.8) == pytest.approx(0.984118, abs=1e-6)
    assert uct_rest(0.5, 0, 9, 0.4, 0.8) == pytest.approx(1.3)


def test_rest_selects_unvisited_child_with_inf_bonus():
    # Parent N = 9; a: V = 0.9, N = 4 -> 0.9 + 0.4·sqrt(2·ln 9 / 4) = 1.3193; b: V = 0.6, N = 0 -> 1.4;
    # c: V = 0.7, N = 1 -> 0.7 + 0.4·sqrt(2·ln 9) = 1.5385 -> c wins.
    tree, algo, kids = _fully_expanded_root(Rest, [0, 0, 0])
    algo.expanded.add(tree.root.id)
    algo.visits[tree.root.id] = 9
    for kid, (v, n) in zip(kids, [(0.9, 4), (0.6, 0), (0.7, 1)]):
        algo.value[kid.id], algo.visits[kid.id] = v, n
    assert algo.select(round_=0) is kids[2]


def test_ets_defaults_are_the_artifacts_and_presets_are_etss_own_by_name():
    from spex.shared.core.search.base import preset_params
    from spex.shared.core.search.ets import Ets

    tree = Tree("q", seed=1, question_tokens=10)
    assert (
        Ets(tree, SearchConfig("ets", 16)).params.lambda_c,
        Ets(tree, SearchConfig("ets", 16)).params.lambda_s,
    ) == (2.0, 0.0)
    got = preset_params("ets", "ets-64", {"lambda_c": 3.0})
    assert got == {"lambda_c": 3.0, "lambda_s": 1.4}  # explicit --param wins over the preset
    p = Ets(tree, SearchConfig("ets", 64, params=preset_params("ets", "ets-64", {}))).params
    assert (p.lambda_c, p.lambda_s) == (1.0, 1.4)
    with pytest.raises(ValueError, match="preset: rebase has no preset 'ets-16'"):
        preset_params("rebase", "ets-16", {})
