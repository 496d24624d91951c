"""A Redis that is full with work already admitted drains: with admission all but off (a reserve
of a byte a unit of target, the whole of maxmemory for headroom) far more questions are
accepted than fit, Redis fills, and yet every one is answered — the searches admitted finish
their writes, generators and scorers publish what they hold before taking more, the coordinator
holds its queries instead of letting them go and adopting them again (issue 52: 789
adopt/release cycles on a full Redis, 0 answered)."""

from tests.services.pipeline.full_redis import post_long_questions


def test_a_full_redis_with_work_admitted_drains(redis_url):
    outcome = post_long_questions(
        redis_url, questions=24, chars=2_000, room_mb=3.5, time_scale=0.02, watch_s=90.0,
        memory_per_target=1, memory_headroom=1.0,
    )  # fmt: skip
    logs = outcome.logs
    assert len(outcome.accepted) == 24, outcome.refused
    assert outcome.peak > outcome.cap, "Redis never filled: nothing to drain"
    assert not outcome.unanswered and not outcome.failed, logs
    assert '"query_released"' not in logs, logs  # held through it, not let go and taken over again
