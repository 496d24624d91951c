"""Every message survives encode → decode on its stream; bad payloads fail with one error type."""

import msgspec
import pytest

from spex.proto import (
    AnswerResult,
    BudgetUpdateEvent,
    CancelRequest,
    GenerateRequest,
    GenerateResult,
    ProtocolError,
    QueryStatsEvent,
    ScoreRequest,
    ScoreResult,
    SubmitQuestionRequest,
    WorkerLoadEvent,
    decode,
    encode,
)
from spex.proto.messages import LogprobSummary
from spex.proto.names import (
    ANSWERS,
    INGRESS,
    QUERY_STATS,
    SCORE_JOBS,
    SINGLE,
    gen_jobs,
    query_inbox,
    query_request,
    reply_key,
    worker_load,
)

ENV = {"msg_id": "m-1", "query_id": "q00001", "trace_id": "t", "attempt": 2, "epoch": 3, "deadline_ms": 99}

SAMPLES = [
    (INGRESS, SubmitQuestionRequest(**ENV, question="1+1?", client_key="k", algorithm="rstar", target=10)),
    (
        gen_jobs("gpu0"),
        GenerateRequest(
            **ENV,
            job_id="j",
            node_id="n",
            parent_id="p",
            child_index=1,
            action="expand",
            prompt_node_ids=["r", "p"],
            prompt_tokens=[120, 64],
            seed=7,
            stop=["ки"],
            priority=1,
        ),
    ),
    (gen_jobs("gpu0"), CancelRequest(**ENV, job_id="j", reason="speculation missed")),
    (
        SCORE_JOBS,
        ScoreRequest(**ENV, job_id="j", node_id="n", prompt_node_ids=["r", "n"], prompt_tokens=[1, 2]),
    ),
    (
        query_inbox("q00001", SINGLE),
        GenerateResult(
            **ENV,
            job_id="j",
            node_id="n",
            text="Step 1: x. The answer is 4",
            tokens=12,
            cached_tokens=100,
            finish_reason="stop",
            logprobs=LogprobSummary(mean=-0.3, min=-2.0, count=12),
        ),
    ),
    (query_inbox("q00001", SINGLE), ScoreResult(**ENV, job_id="j", node_id="n", reward=0.75)),
    (query_inbox("q00001", SINGLE), BudgetUpdateEvent(**ENV, share=3, k_total=25)),
    (QUERY_STATS, QueryStatsEvent(**ENV, running=[0.9], offers=[0.8, 0.5], prefix_tokens=900, active_jobs=2)),
    (ANSWERS, AnswerResult(**ENV, answer="4", correct=True, nodes=40, tokens_generated=3000, latency_s=12.5)),
    # Keys that hold one message.
    (reply_key("q00001", SINGLE), AnswerResult(**ENV, answer=None, nodes=3)),
    (query_request("q00001", SINGLE), SubmitQuestionRequest(**ENV, question="2+2?")),
    (
        worker_load("gen-0"),
        WorkerLoadEvent(
            **{**ENV, "query_id": ""},
            worker="gen-0",
            primary=2,
            primary_ctx=900,
            spec=5,
            running=7,
            waiting=0,
            kv_held=4000,
            kv_capacity=90000,
            prefix_cache_hit_rate=0.8,
            jobs_done=11,
        ),
    ),
]


@pytest.mark.parametrize(("stream", "message"), SAMPLES, ids=[type(m).__name__ + "@" + s for s, m in SAMPLES])
def test_message_round_trips_on_its_stream(stream, message):
    assert decode(stream, encode(message)) == message


def test_unknown_fields_are_ignored_for_rolling_upgrades():
    msg = ScoreResult(**ENV, job_id="j", node_id="n", reward=0.5)
    raw = msgspec.msgpack.decode(encode(msg))
    raw["added_in_v1_1"] = {"anything": [1, 2]}
    assert decode(query_inbox("q", SINGLE), msgspec.msgpack.encode(raw)) == msg


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"\xc1garbage", "MessagePack"),
        (msgspec.msgpack.encode([1, 2, 3]), "MessagePack map"),
        (msgspec.msgpack.encode({"type": "ScoreResult", "msg_id": "m"}), "missing required field"),
        (msgspec.msgpack.encode({"type": "NoSuchThing", "msg_id": "m", "query_id": "q"}), "NoSuchThing"),
        (
            msgspec.msgpack.encode(
                {**ENV, "type": "ScoreResult", "job_id": "j", "node_id": "n", "reward": "hi"}
            ),
            "Expected `float`",
        ),
    ],
)
def test_malformed_payload_raises_protocol_error(payload, fragment):
    with pytest.raises(ProtocolError, match=fragment):
        decode(query_inbox("q", SINGLE), payload)


def test_unknown_protocol_version_is_rejected():
    raw = msgspec.msgpack.decode(encode(ScoreResult(**ENV, job_id="j", node_id="n", reward=0.5)))
    raw["v"] = 2
    with pytest.raises(ProtocolError, match="unknown protocol version 2"):
        decode(query_inbox("q", SINGLE), msgspec.msgpack.encode(raw))


def test_message_on_the_wrong_stream_is_rejected():
    payload = encode(ScoreResult(**ENV, job_id="j", node_id="n", reward=0.5))
    with pytest.raises(ProtocolError):
        decode(INGRESS, payload)
    with pytest.raises(ProtocolError, match="no message types"):
        decode("no:such:stream", payload)


def test_a_message_over_the_size_limit_is_refused_both_ways():
    from spex.proto.messages import MAX_MESSAGE_BYTES

    huge = SubmitQuestionRequest(**ENV, question="x" * MAX_MESSAGE_BYTES)
    with pytest.raises(ProtocolError, match="byte limit"):
        encode(huge)
    raw = msgspec.msgpack.encode(
        {**ENV, "type": "SubmitQuestionRequest", "question": "x" * MAX_MESSAGE_BYTES}
    )
    with pytest.raises(ProtocolError, match="message limit"):
        decode(INGRESS, raw)
