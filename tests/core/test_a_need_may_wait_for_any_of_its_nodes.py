"""A search resumed when any of its nodes is ready (`Need(wait="any")`): best-of-N's chains go
on one by one — a chain's next step is asked for as soon as its step is generated, without
waiting for the other chains or any score — and the tree and answer do not depend on the
order results come in."""

import pytest

from spex.shared.core.commands import GenerateCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SearchConfig
from tests.core.machine_runs import run_query


def test_a_chain_s_next_step_is_asked_for_as_soon_as_its_step_is_generated():
    machine = QueryMachine("q1", 100, SearchConfig("best_of_n", 4), seed=3)
    first = [c for c in machine.start(0.0) if isinstance(c, GenerateCommand)]
    assert [c.node.index for c in first] == [0, 1, 2, 3]
    out = machine.on_generated(first[2].job_id, first[2].node.id, "step", 40, "stop", -0.1, 1.0)
    asked = [c.node for c in out if isinstance(c, GenerateCommand)]
    assert [(n.parent, n.index) for n in asked] == [(first[2].node, 0)]  # chain 2 goes on alone


@pytest.mark.parametrize("seed", range(4))
def test_the_tree_and_answer_do_not_depend_on_the_order_results_come_in(seed):
    runs = [run_query("best_of_n", 8, seed, order_seed=k) for k in (None, 1, 2, 3)]
    assert len({m.tree.digest(rewards=True) for m in runs}) == 1
    assert len({m.answer for m in runs}) == 1
    assert all(len(m.solutions) == 8 for m in runs)


def test_every_step_is_scored_before_the_answer_is_chosen():
    machine = run_query("best_of_n", 6, 0)
    assert all(n.scored for n in machine.tree if n.parent is not None)
    assert machine.done
