"""A step the model ended with EOS is a leaf: the search does not grow it (the real-model
terminal test beside `\\boxed{}` answers and the depth limit)."""

import pytest

from spex.shared.core.commands import GenerateCommand, ScoreCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SearchConfig


@pytest.mark.parametrize("algorithm", ["rebase", "rstar"])
def test_steps_ended_by_eos_are_not_expanded(algorithm):
    machine = QueryMachine("q", 10, SearchConfig(algorithm, 2), seed=0)
    pending, generated, t = machine.start(0.0), 0, 0.0
    while pending and not machine.done:
        cmd = pending.pop(0)
        t += 1
        if isinstance(cmd, GenerateCommand):
            generated += 1
            pending += machine.on_generated(cmd.job_id, cmd.node.id, "We are done.", 5, "eos", -1.0, t)
        elif isinstance(cmd, ScoreCommand):
            pending += machine.on_scored(cmd.node.id, 0.5, t)
    assert machine.done and machine.answer is None
    leaves = [n for n in machine.tree if n.parent is not None]
    assert all(n.terminal and not n.kids() for n in leaves)  # no step below an EOS
    assert generated == len(leaves) and max(n.depth for n in leaves) == 1
