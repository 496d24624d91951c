"""Redis loses its data (FLUSHALL) with questions in flight under client keys, their
coordinator stalled, and the ingress restarted: the new ingress, which never saw the data, knows
of the loss (the marker whoever noticed it wrote), so a key posted again to it waits for its
first question to be stored again (503 with Retry-After) rather than start a second search,
and every question accepted, before or after, is answered exactly once (issue 52: the new
ingress took the keys as new at once, and 2 of 20 accepted questions were never answered)."""

from tests.services.pipeline.data_loss import QUESTIONS, flush_with_a_stalled_coordinator


def test_a_flushall_and_an_ingress_restart_answer_every_question_once(redis_url):
    outcome = flush_with_a_stalled_coordinator(redis_url, restart_ingress=True)
    logs = outcome.logs
    assert not outcome.unanswered, logs
    assert outcome.reposted == outcome.originals, logs
    assert all(status in (0, 503) for status, _ in outcome.refusals), outcome.refusals  # 0: restarting
    assert all(retry_after for status, retry_after in outcome.refusals if status == 503)
    assert sorted(outcome.answered.values()) == [1] * QUESTIONS, outcome.answered
