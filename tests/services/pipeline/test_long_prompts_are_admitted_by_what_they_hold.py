"""Long questions under a small `maxmemory` (the issue's wedge, scaled down: 25 MB and 98,000
characters there, a few MB and 40,000 here): admission counts what each question holds in
Redis, its prompt included, so every question accepted is answered, the rest are refused with
a 503 naming memory, Redis never reaches its cap, and `/ready` stays 200. (Issue 52: the
reserve counted a search's target only while every job carried the whole prompt; 30 questions
admitted, Redis out of memory for the 8 minutes measured, 0 answered.)"""

from tests.services.pipeline.full_redis import post_long_questions


def test_long_questions_are_answered_or_refused_never_wedged(redis_url):
    outcome = post_long_questions(redis_url, questions=16, chars=40_000, room_mb=6.0)
    logs = outcome.logs
    assert outcome.accepted, outcome.refused
    assert not outcome.unanswered and not outcome.failed, logs
    assert outcome.refused, "the room fits fewer than all of them"
    assert all(s == 503 and "memory" in e and ra for s, e, ra in outcome.refused), outcome.refused
    assert outcome.peak < outcome.cap, (outcome.peak, outcome.cap)
    assert set(outcome.ready) == {200}, outcome.ready
    assert '"query_released"' not in logs, logs
