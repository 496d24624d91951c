"""A short `spex chaos` run: seeded kills, stalls, partitions and Redis restarts while
questions arrive; nothing lost, nothing answered twice, every tree the fault-free one."""

import asyncio

from spex.bench.chaos.run import FAULT_KINDS, run_chaos, schedule


def test_the_schedule_is_a_function_of_the_seed():
    names = ["coord-0", "gen-0", "scorer-0"]
    assert schedule(3, 600, names, 6) == schedule(3, 600, names, 6)
    assert schedule(3, 600, names, 6) != schedule(4, 600, names, 6)
    kinds = {f.kind for f in schedule(3, 3600, names, 20)}
    assert kinds == set(FAULT_KINDS)


def test_a_short_chaos_run_loses_nothing():
    lines = []
    # Seed 2: 11 faults in 25 s, every kind among them (kills, stalls, partitions, a Redis restart).
    report = asyncio.run(run_chaos(seed=2, duration_s=25, questions=8, faults_per_min=30, say=lines.append))
    assert len(report.faults) == 11 and set(report.by_kind()) == set(FAULT_KINDS)
    assert report.ok, (report.lost, report.duplicated, report.differing, "\n".join(lines))


def test_a_short_chaos_run_with_early_termination_loses_nothing():
    """T3 on: the coordinator cancels a stopped search's jobs and answers it once, through kills,
    stalls, partitions and a Redis restart; every answer is T3's fault-free one."""
    lines = []
    report = asyncio.run(
        run_chaos(seed=5, duration_s=20, questions=8, faults_per_min=30, early_stop=True, say=lines.append)
    )
    assert len(report.faults) == 10 and set(report.by_kind()) == set(FAULT_KINDS)
    assert report.ok, (report.lost, report.duplicated, report.differing, "\n".join(lines))
    assert report.early_stopped > 0  # T3 stopped searches under the faults


def test_the_supervisors_own_restart_is_a_fault_kind_and_loses_nothing():
    """`--supervisor-faults`: every service stops through its lifeline (as when the supervisor
    is SIGKILLed) and a new set starts; questions in flight are taken over and answered once."""
    names = ["coord-0", "coord-1", "gen-0", "gen-1", "scorer-0", "alloc-0"]
    assert "supervisor" not in {f.kind for f in schedule(3, 3600, names, 20)}
    assert "supervisor" in {f.kind for f in schedule(3, 3600, names, 20, supervisor=True)}
    lines = []
    report = asyncio.run(
        run_chaos(
            seed=8, duration_s=20, questions=8, faults_per_min=30, supervisor_faults=True, say=lines.append
        )
    )
    assert "supervisor" in report.by_kind(), report.by_kind()
    assert report.ok, (report.lost, report.duplicated, report.differing, "\n".join(lines))


def test_redis_out_of_memory_is_a_fault_kind_and_fails_nothing():
    """`--oom-faults`: Redis's maxmemory set tiny for a while with questions in flight (every
    write refused), then restored: every question accepted is answered (none failed), and the
    ingress refused new ones meanwhile with 503 naming memory (never 500)."""
    names = ["coord-0", "coord-1", "gen-0", "gen-1", "scorer-0", "alloc-0", "ingress-0"]
    assert "oom" not in {f.kind for f in schedule(3, 3600, names, 20)}
    assert "oom" in {f.kind for f in schedule(3, 3600, names, 20, oom=True)}
    lines = []
    # Seed 15: a kill, Redis out of memory for 2 s, a partition, within 20 s.
    report = asyncio.run(
        run_chaos(seed=15, duration_s=20, questions=8, faults_per_min=30, oom_faults=True, say=lines.append)
    )
    assert "oom" in report.by_kind(), report.by_kind()
    assert report.refused, "the ingress was not asked while Redis was out of memory"
    assert report.ok, (report.lost, report.failed, report.refused_wrongly, report.differing, "\n".join(lines))
