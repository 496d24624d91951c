"""Redis loses its data (FLUSHALL) with questions in flight under client keys while their
coordinator is stalled past the ingress's recovery window: every key posted again gets its
first question back once the coordinator has stored it again (until then a 503 with
Retry-After), so no question is searched twice and every one is answered once; its id never
reads 404 meanwhile (issue 52: each key got a second search, the two answers differing)."""

from tests.services.pipeline.data_loss import QUESTIONS, flush_with_a_stalled_coordinator


def test_a_flushall_past_a_stalled_coordinator_gives_no_key_a_second_search(redis_url):
    outcome = flush_with_a_stalled_coordinator(redis_url, restart_ingress=False)
    logs = outcome.logs
    assert outcome.reposted == outcome.originals, logs  # the same questions, not second searches
    assert all(status == 503 and retry_after for status, retry_after in outcome.refusals), outcome.refusals
    assert 404 not in outcome.reads, f"{outcome.reads.count(404)} reads of {len(outcome.reads)} said 404"
    assert not outcome.unanswered, logs
    assert sorted(outcome.answered.values()) == [1] * QUESTIONS, outcome.answered  # once each
