"""A job a service gave up on (JobFailedEvent): failed speculation is dropped and the tree is
the baseline's; a failed job the search waits on fails the query with the reason."""

import random

from spex.proto.messages import PRIMARY
from spex.shared.core.commands import CancelCommand, GenerateCommand, ScoreCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES, SearchConfig
from spex.shared.core.speculation import SpecPolicy
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs


def drive(speculate, fail, algorithm="rebase", target=8, seed=0):
    """Run one query; `fail(cmd, machine)` says whether a job fails instead of finishing."""
    workload = SyntheticWorkload(WorkloadKnobs(), seed, SEARCHES[algorithm].family)
    spec = workload.query(1)
    machine = QueryMachine(
        spec.query_id, spec.prompt_tokens, SearchConfig(algorithm, target), seed,
        speculation=SpecPolicy(enabled=speculate), share=6 if speculate else 0,
    )  # fmt: skip
    rng, pending, t = random.Random(0), list(machine.start(0.0)), 0.0
    while not machine.done:
        assert pending, "stalled"
        cmd = pending.pop(rng.randrange(len(pending)))
        t += 1.0
        if isinstance(cmd, (GenerateCommand, ScoreCommand)) and fail(cmd, machine):
            kind = "generate" if isinstance(cmd, GenerateCommand) else "score"
            job = cmd.job_id if kind == "generate" else cmd.node.id
            pending += machine.on_failed(job, cmd.node.id, kind, "engine: refused", t)
        elif isinstance(cmd, GenerateCommand):
            g = workload.generate(spec, [n.id for n in cmd.node.path()])
            pending += machine.on_generated(
                cmd.job_id, cmd.node.id, g.text, g.tokens, g.finish_reason, g.mean_logprob, t
            )
        elif isinstance(cmd, ScoreCommand):
            pending += machine.on_scored(
                cmd.node.id, workload.prm_reward(spec, [n.id for n in cmd.node.path()]), t
            )
        elif isinstance(cmd, CancelCommand):
            pending = [c for c in pending if not (isinstance(c, GenerateCommand) and c.job_id == cmd.job_id)]
    return machine


def _speculative(cmd, machine):
    return cmd.priority != PRIMARY and cmd.node.id not in machine._requested


def test_failed_speculation_is_dropped_and_the_tree_is_the_baselines():
    failed = []

    def fail(cmd, machine):
        if _speculative(cmd, machine) and len(failed) < 20:
            failed.append(cmd.node.id)
            return True
        return False

    baseline = drive(False, lambda *_: False)
    spex = drive(True, fail)
    assert len(failed) == 20 and not spex.error
    assert (spex.tree.digest(), spex.answer) == (baseline.tree.digest(), baseline.answer)


def test_a_failed_job_the_search_waits_on_fails_the_query():
    def fail(cmd, machine):
        return isinstance(cmd, GenerateCommand) and cmd.node.depth == 2 and not _speculative(cmd, machine)

    machine = drive(True, fail)
    assert machine.done and machine.answer is None
    assert "generate job" in machine.error and "engine: refused" in machine.error
