"""REBASE and ETS grow `max_depth` levels and then examine the last one too: a step at the
deepest level that gives an answer is a solution (the search used to return without looking,
and a depth-4 "The answer is 25" left the query with no answer)."""

import pytest

from spex.shared.core.commands import GenerateCommand, ScoreCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SearchConfig


def search(algorithm: str, max_depth: int) -> QueryMachine:
    """Every step is plain text except at `max_depth`, where each one answers 25."""
    config = SearchConfig(algorithm, 4, params={"max_depth": float(max_depth)})
    machine = QueryMachine("q", 10, config, 0)
    pending = list(machine.start(0.0))
    t = 0.0
    while pending:
        cmd = pending.pop(0)
        t += 1.0
        if isinstance(cmd, GenerateCommand):
            text = "The answer is 25" if cmd.node.depth == max_depth else f"Step {cmd.node.depth}: go on."
            pending += machine.on_generated(cmd.job_id, cmd.node.id, text, 8, "stop", -0.5, t)
        elif isinstance(cmd, ScoreCommand):
            pending += machine.on_scored(cmd.node.id, 0.5, t)
    return machine


@pytest.mark.parametrize("algorithm", ["rebase", "ets"])
@pytest.mark.parametrize("max_depth", [1, 3])
def test_answers_at_the_deepest_level_count(algorithm, max_depth):
    machine = search(algorithm, max_depth)
    assert machine.done and max(n.depth for n in machine.tree) == max_depth  # grew no deeper
    assert machine.answer == "25"
    assert machine.solutions and all(s.depth == max_depth for s in machine.solutions)
