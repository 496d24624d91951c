"""The prediction hooks on hand-built trees."""

from spex.shared.core.ids import child_id, node_seed
from spex.shared.core.search.base import SearchConfig
from spex.shared.core.search.rebase import Rebase, ceil_softmax_widths
from spex.shared.core.search.rest import Rest
from spex.shared.core.search.rstar import Rstar
from spex.shared.core.tree import EXPAND, ROLLOUT, Node, Tree


class View:
    """A minimal SpecView: speculative handles by identity, a set of busy ids."""

    def __init__(self, tree):
        self.tree, self.handles, self.in_flight = tree, {}, set()

    def child(self, parent, index, action=EXPAND):
        cid = child_id(parent.id, index, action)
        if cid in self.tree.nodes:
            return self.tree.nodes[cid]
        if cid not in self.handles:
            self.handles[cid] = Node(
                cid, parent, index, action, parent.depth + 1, node_seed(self.tree.seed, cid)
            )
        return self.handles[cid]

    def busy(self, node):
        return node.id in self.in_flight


def done(node, reward, answer=None, tokens=50):
    node.generated, node.reward, node.answer, node.tokens = True, reward, answer, tokens
    node.cum_tokens = tokens + (node.parent.cum_tokens if node.parent else 0)


def test_rebase_expands_finished_scored_nodes_with_provisional_widths():
    tree = Tree("q", seed=4, question_tokens=100)
    algo = Rebase(tree, SearchConfig("rebase", 8))
    level = [tree.child(tree.root, i) for i in range(8)]
    algo.pending, algo.pending_remaining = level, 8
    done(level[0], 0.9)
    done(level[1], 0.5)
    done(level[2], 0.1)
    done(level[3], 0.7, answer="4")  # finished: consumes one unit of the budget
    level[4].generated = True  # generated, not yet scored: not a candidate yet
    view = View(tree)
    got = algo.predict(view, k=100)
    # Candidates .9, .5, .1; remaining 8 - 1 = 7; provisional budget min(7, ceil(1.2 * 3)) = 4.
    assert ceil_softmax_widths([0.9, 0.5, 0.1], 4, 0.2) == [4, 0, 0]
    assert got == [view.child(level[0], i) for i in range(4)]
    assert all(n not in tree.nodes.values() for n in got)  # predictions never enter the tree


def test_rebase_looks_ahead_through_scored_speculative_children_and_skips_busy():
    tree = Tree("q", seed=4, question_tokens=100)
    algo = Rebase(tree, SearchConfig("rebase", 4))
    level = [tree.child(tree.root, i) for i in range(4)]
    algo.pending, algo.pending_remaining = level, 4
    done(level[0], 0.9)
    view = View(tree)
    first = algo.predict(view, k=10)  # ceil(1.2) = 2 children of level[0]
    assert first == [view.child(level[0], 0), view.child(level[0], 1)]
    done(first[0], 0.8)
    view.in_flight.add(first[1].id)
    second = algo.predict(view, k=10)
    assert second == [view.child(first[0], 0), view.child(first[0], 1)]  # depth 2, shallow first


def test_rebase_speculation_dies_once_the_width_is_decided():
    tree = Tree("q", seed=4, question_tokens=100)
    algo = Rebase(tree, SearchConfig("rebase", 4))
    level = [tree.child(tree.root, i) for i in range(4)]
    algo.pending = level
    view = View(tree)
    under_pending = view.child(level[0], 0)
    deeper = view.child(under_pending, 0)
    assert algo.spec_alive(under_pending) and algo.spec_alive(deeper)
    missed = view.child(tree.root, 9)  # a child of the root the search did not ask for
    assert not algo.spec_alive(missed)
    algo.pending = [tree.child(level[0], 0)]  # the next level: level[0]'s width is decided
    assert not algo.spec_alive(view.child(level[0], 3))


def test_rstar_simulates_the_next_uct_selections_with_virtual_visits():
    tree = Tree("q", seed=2, question_tokens=100)
    algo = Rstar(tree, SearchConfig("rstar", 10, params={"branch": 3}))
    a, b, c = (tree.child(tree.root, i) for i in range(3))
    for n in (a, b, c):
        done(n, 0.5)
    algo.visits = {tree.root.id: 5, a.id: 3, b.id: 1, c.id: 1}
    algo.value = {tree.root.id: 2.6, a.id: 1.5, b.id: 0.9, c.id: 0.2}
    algo.rollout, algo.path = 5, [tree.root, a]  # rollout 5 is below a
    view = View(tree)
    got = algo.predict(view, k=6)
    # With the rollout in progress as a visit (root 6, a 4), rollout 6 picks by UCT:
    #   a: 1.5/4 + 2·sqrt(ln 6 / 4) = 1.7136; b: 0.9 + 2·sqrt(ln 6) = 3.5771; c: 0.2 + 2.6771 = 2.8771 -> b,
    # which has no children: its whole expansion is the prediction. Then root 7, b 2; rollout 7:
    #   a: 0.375 + 2·sqrt(ln 7 / 4) = 1.7700; b: 0.45 + 2·sqrt(ln 7 / 2) = 2.4228;
    #   c: 0.2 + 2·sqrt(ln 7) = 2.9899 -> c, expanded next.
    assert got == [view.child(b, i) for i in range(3)] + [view.child(c, i) for i in range(3)]
    assert [algo.spec_distance(n) for n in got] == [1, 1, 1, 2, 2, 2]
    # k caps the nodes, not the expansions: a part of c's expansion is predicted first.
    assert [n.id for n in algo.predict(View(tree), k=4)[3:]] == [view.child(c, 0).id]
    # Statistics are untouched: prediction works on copies.
    assert algo.visits[tree.root.id] == 5 and algo.visits[a.id] == 3


def test_rstar_skips_a_rollout_that_reaches_an_expansion_in_flight():
    tree = Tree("q", seed=2, question_tokens=100)
    algo = Rstar(tree, SearchConfig("rstar", 10, params={"branch": 3}))
    kids = [tree.child(tree.root, i) for i in range(3)]
    for n in kids:
        done(n, 0.5)
    algo.visits = {tree.root.id: 1, kids[0].id: 1}
    algo.value = {tree.root.id: 0.5, kids[0].id: 0.5}
    algo.rollout, algo.path = 1, [tree.root, kids[0]]
    view = View(tree)
    first = algo.predict(view, k=3)
    parent = first[0].parent
    assert parent in kids[1:] and [n.parent for n in first] == [parent] * 3
    view.in_flight.update(n.id for n in first)
    again = algo.predict(view, k=3)
    assert len(again) == 3 and again[0].parent not in (parent, tree.root)


def test_rest_predicts_the_lookahead_of_the_best_scored_new_child():
    tree = Tree("q", seed=1, question_tokens=100)
    algo = Rest(tree, SearchConfig("rest", 5))
    kids = [tree.child(tree.root, i) for i in range(3)]
    algo.round, algo.current = 0, tree.root
    done(kids[0], 0.4)
    done(kids[1], 0.7)
    view = View(tree)
    view.in_flight.add(kids[2].id)
    got = algo.predict(view, k=5)
    assert got[0] == view.child(kids[1], 0, ROLLOUT)
