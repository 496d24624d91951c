"""The synthetic workload on a cluster and in virtual time: its questions submitted to a
cluster and answered, what the virtual-time run answers for the same ones (the fault-free
reference every pipeline test compares against), and the allocator's shares a query received."""

from spex.bench.vtime import BenchConfig, run_bench
from spex.proto import BudgetUpdateEvent, decode
from spex.proto.names import query_inbox
from spex.shared.core.spec.early_stop import EarlyStop
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs


async def submit_all(cluster, algorithm, target, questions, mode, seed=0, first=0, **options):
    """Submit the workload's questions `first`.. (`questions` of them) to `cluster` and wait:
    query id -> its answer (None where none came within a minute)."""
    workload = SyntheticWorkload(WorkloadKnobs(), seed)
    qids = []
    for i in range(first, first + questions):
        question = workload.query(i)
        qids.append(
            await cluster.client.submit(
                question.text,
                query_id=question.query_id,
                algorithm=algorithm,
                target=target,
                seed=seed,
                mode=mode,
                prompt_tokens=question.prompt_tokens,
                **options,
            )
        )
    return {q: await cluster.client.result(q, timeout_s=60) for q in qids}


def virtual_time(algorithm, target, questions, mode, seed=0, early_stop=None):
    """The virtual-time run of the same questions: query id -> (answer, tree digest), and
    whether T3 stopped the search where `early_stop` is given."""
    res = run_bench(
        BenchConfig(
            algorithm=algorithm,
            target=target,
            questions=questions,
            batch_size=questions,
            mode=mode,
            seed=seed,
            early_stop=early_stop or EarlyStop(),
        )
    )
    if early_stop is None:
        return {r.query_id: (r.answer, r.digest) for r in res.records}
    return {r.query_id: (r.answer, r.digest, r.early_stopped) for r in res.records}


async def budgets_received(cluster, answers):
    """BudgetUpdateEvents in the queries' inboxes (the allocator's T2 shares)."""
    count, parts = 0, cluster.client.partitions
    for qid in answers:
        for _, fields in await cluster.client.r.xrange(query_inbox(qid, parts)):
            count += isinstance(decode(query_inbox(qid, parts), fields[b"e"]), BudgetUpdateEvent)
    return count
