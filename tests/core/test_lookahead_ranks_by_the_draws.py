"""The look-ahead predictor ranks what the search would ask for next by how many guessed futures
ask for it: on a hand-built search whose next request hangs on a reward still pending, the
likelihoods are the shares of the guesses, drawn from what the node's siblings scored."""

import pytest

from spex.shared.core.commands import GenerateCommand
from spex.shared.core.lookahead import LookaheadParams, LookaheadPredictor
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES, Need, SearchAlgorithm, SearchConfig
from spex.shared.core.speculation import SpecPolicy, auto_predictor


class GrowTheFirstOrSecond(SearchAlgorithm):
    """Four children of the question; then child 0 grows if child 3 scored above 0.5, else
    child 1: two children of it, then one grandchild under the first of those."""

    name = "grow-first-or-second"
    family = "bfs"
    default_selection = "best"

    def run(self):
        kids = [self.tree.child(self.tree.root, i) for i in range(4)]
        yield Need(kids, scored=True)
        grown = kids[0] if (kids[3].reward or 0.0) > 0.5 else kids[1]
        pair = [self.tree.child(grown, i) for i in range(2)]
        yield Need(pair, scored=True)
        last = self.tree.child(pair[0], 0)
        yield Need([last], scored=True)
        return [last]


@pytest.fixture
def machine(monkeypatch):
    """The search's query with the first three children generated and scored 0.9, 0.9 and
    0.1, child 3 generated and its score pending; no share, so nothing is issued ahead."""
    monkeypatch.setitem(SEARCHES, GrowTheFirstOrSecond.name, GrowTheFirstOrSecond)
    predictors = []

    def factory(algorithm):
        predictors.append(LookaheadPredictor(algorithm, LookaheadParams(draws=400)))
        return predictors[0]

    m = QueryMachine("q", 12, SearchConfig(GrowTheFirstOrSecond.name, 1), 0, speculation=SpecPolicy(True),
                     predictor=factory)  # fmt: skip
    jobs = {c.node.index: c for c in m.start(0.0) if isinstance(c, GenerateCommand)}
    for i, reward in [(0, 0.9), (1, 0.9), (2, 0.1), (3, None)]:
        m.on_generated(jobs[i].job_id, jobs[i].node.id, f"step {i}", 20, "stop", -0.5, 1.0)
        if reward is not None:
            m.on_scored(jobs[i].node.id, reward, 2.0)
    m.look = predictors[0]
    return m


def test_each_candidate_is_as_likely_as_the_share_of_draws_that_ask_for_it(machine):
    root = machine.tree.root
    first, second = (machine.tree.nodes[root.child_id(i, "expand")] for i in range(2))
    out = machine.look.predict(machine.spec, 8)  # the query's view: its speculator
    # Child 3's reward is drawn from its siblings' 0.9, 0.9 and 0.1: child 0 grows in 2/3 of the
    # draws, child 1 in the rest; each grown child's two children are asked for together.
    assert [n.parent for n in out] == [first, first, second, second]
    assert [n.index for n in out] == [0, 1, 0, 1]
    p_first, p_second = (machine.look.spec_likelihood(out[i]) for i in (0, 2))
    assert p_first == pytest.approx(2 / 3, abs=0.07)
    assert p_first + p_second == pytest.approx(1.0)
    assert machine.look.spec_likelihood(out[1]) == p_first
    # What is offered can be issued now: not generated, not in flight, its parent generated.
    assert all(not n.generated and not machine.busy(n) and n.parent.generated for n in out)
    assert {machine.look.spec_distance(n) for n in out} == {1}  # the search's next request


def test_once_the_reward_arrives_the_other_branch_is_dead(machine):
    before = machine.look.predict(machine.spec, 8)
    assert all(machine.look.spec_alive(n) for n in before)  # either child may still grow
    third = machine.tree.nodes[machine.tree.root.child_id(3, "expand")]
    machine.on_scored(third.id, 0.2, 3.0)  # child 1 grows: the search asks for its children
    second = machine.tree.nodes[machine.tree.root.child_id(1, "expand")]
    assert len(second.children) == 2 and all(machine.busy(n) for n in second.children)
    assert machine.look.predict(machine.spec, 8) == []  # the grandchild waits on a child in flight
    first_kids = [n for n in before if n.parent.index == 0]
    assert first_kids and not any(machine.look.spec_alive(n) for n in first_kids)


def test_a_search_without_hooks_gets_the_look_ahead_by_default(monkeypatch):
    monkeypatch.setitem(SEARCHES, GrowTheFirstOrSecond.name, GrowTheFirstOrSecond)
    m = QueryMachine("q", 12, SearchConfig(GrowTheFirstOrSecond.name, 1), 0)
    assert isinstance(auto_predictor(m.algorithm), LookaheadPredictor)
    rebase = QueryMachine("q", 12, SearchConfig("rebase", 4), 0)
    assert auto_predictor(rebase.algorithm) is rebase.algorithm  # its own hooks
