"""A query machine run to the end over the synthetic workload, the test choosing the order its
commands complete in: with speculation (`drive`) and without (`run_query`)."""

import random

from spex.shared.core.commands import CancelCommand, GenerateCommand, ScoreCommand
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES, SearchConfig
from spex.shared.core.speculation import SpecPolicy
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs


def drive(
    algorithm, target, seed, speculate, share=6, order_seed=0, after_event=None, twin=False, predictor=None
):
    """Run query 1 of the workload to the end, its commands completed in the order `order_seed`
    draws, speculating (with `share`, by `predictor`: a factory, None for the default) or not,
    as itself or as its baseline `twin` (a query of its own growing query 1's tree);
    `after_event(machine)` after each command: (machine, the commands in the order they ran)."""
    workload = SyntheticWorkload(WorkloadKnobs(), seed, SEARCHES[algorithm].family)
    spec = workload.query(1)
    machine = QueryMachine(
        f"{spec.query_id}.baseline" if twin else spec.query_id,
        spec.prompt_tokens,
        SearchConfig(algorithm, target),
        seed,
        speculation=SpecPolicy(enabled=speculate),
        share=share if speculate else 0,
        tree_key=spec.query_id if twin else "",
        **({} if predictor is None else {"predictor": predictor}),
    )
    rng = random.Random(order_seed)
    log, pending = [], list(machine.start(0.0))
    t = 0.0
    while not machine.done:
        assert pending, "stalled"
        cmd = pending.pop(rng.randrange(len(pending)))
        log.append(cmd)
        t += 1.0
        if isinstance(cmd, GenerateCommand):
            path = [n.id for n in cmd.node.path()]
            g = workload.generate(spec, path)
            pending += machine.on_generated(
                cmd.job_id, cmd.node.id, g.text, g.tokens, g.finish_reason, g.mean_logprob, t
            )
        elif isinstance(cmd, ScoreCommand):
            path = [n.id for n in cmd.node.path()]
            pending += machine.on_scored(cmd.node.id, workload.prm_reward(spec, path), t)
        elif isinstance(cmd, CancelCommand):
            pending = [c for c in pending if not (isinstance(c, GenerateCommand) and c.job_id == cmd.job_id)]
        if after_event is not None:
            after_event(machine)
    return machine, log


def run_query(algorithm, target, seed, order_seed=None, reward="prm", query=3):
    """Run query `query` of the workload to the end without speculation, its commands completed
    first to last or, given `order_seed`, in the order it draws: the finished machine."""
    workload = SyntheticWorkload(WorkloadKnobs(), seed, SEARCHES[algorithm].family)
    spec = workload.query(query)
    machine = QueryMachine(spec.query_id, spec.prompt_tokens, SearchConfig(algorithm, target), seed, reward)
    pending = list(machine.start(0.0))
    rng = random.Random(order_seed)
    steps = 0
    while not machine.done:
        cmd = pending.pop(rng.randrange(len(pending)) if order_seed is not None else 0)
        path = [n.id for n in cmd.node.path()] if isinstance(cmd, GenerateCommand | ScoreCommand) else []
        steps += 1
        if isinstance(cmd, GenerateCommand):
            gen = workload.generate(spec, path)
            pending += machine.on_generated(
                cmd.job_id,
                cmd.node.id,
                gen.text,
                gen.tokens,
                gen.finish_reason,
                gen.mean_logprob,
                float(steps),
            )
        elif isinstance(cmd, ScoreCommand):
            pending += machine.on_scored(cmd.node.id, workload.prm_reward(spec, path), float(steps))
    return machine
