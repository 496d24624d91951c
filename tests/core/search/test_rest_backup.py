"""ReST-MCTS* visit-weighted value backup against a hand-computed tree."""

import pytest

from spex.shared.core.search.base import SearchConfig
from spex.shared.core.search.rest import Rest
from spex.shared.core.tree import Tree


def test_value_backup_matches_hand_computation():
    #            root (expanded)
    #        a (expanded)     b: V .3 N 1      c: V .9 N 0
    #   a1: V .8 N 1   a2: V .2 N 0   a3: V .5 N 2
    tree = Tree("q", seed=0, question_tokens=10)
    algo = Rest(tree, SearchConfig(algorithm="rest", target=1))
    a, b, c = (tree.child(tree.root, i) for i in range(3))
    a1, a2, a3 = (tree.child(a, i) for i in range(3))
    algo.expanded |= {tree.root.id, a.id}
    stats = {
        a: (0.4, 1),
        b: (0.3, 1),
        c: (0.9, 0),
        a1: (0.8, 1),
        a2: (0.2, 0),
        a3: (0.5, 2),
        tree.root: (0.0, 2),
    }
    for node, (v, n) in stats.items():
        algo.value[node.id], algo.visits[node.id] = v, n

    algo.backpropagate(a)

    # a: N 1 -> 2; V = (0.8·1 + 0.2·0 + 0.5·2) / 3 = 0.6
    assert algo.visits[a.id] == 2
    assert algo.value[a.id] == pytest.approx(0.6)
    # root: N 2 -> 3; V = (0.6·2 + 0.3·1 + 0.9·0) / 3 = 0.5
    assert algo.visits[tree.root.id] == 3
    assert algo.value[tree.root.id] == pytest.approx(0.5)
    # Leaves and siblings are untouched.
    assert (algo.value[b.id], algo.visits[b.id]) == (0.3, 1)


def test_unexpanded_node_keeps_its_own_value():
    tree = Tree("q", seed=0, question_tokens=10)
    algo = Rest(tree, SearchConfig(algorithm="rest", target=1))
    leaf = tree.child(tree.root, 0)
    algo.value[leaf.id], algo.visits[leaf.id] = 0.7, 1
    algo.backpropagate(leaf)
    assert (algo.value[leaf.id], algo.visits[leaf.id]) == (0.7, 2)
