"""A field of a closed value set takes only its values: any other fails to decode with a reason
that names the field (the bus dead-letters the entry with it), while the bytes on the wire are
what they were, so old and new services read each other's messages."""

from typing import get_args

import msgspec
import pytest

from spex.proto import (
    CONTENTS,
    FINISH_REASONS,
    JOB_KINDS,
    MODES,
    SIM_STYLES,
    Content,
    GenerateRequest,
    GenerateResult,
    JobFailedEvent,
    ProtocolError,
    ScoreRequest,
    SubmitQuestionRequest,
    Synthetic,
    decode,
    encode,
    submission,
)
from spex.proto.names import DEFAULT_POOL, INGRESS, SCORE_JOBS, SINGLE, gen_jobs, query_inbox
from tests.proto.examples import ENV, JOB

SCORE = ScoreRequest(**ENV, job_id="j", node_id="n", prompt_node_ids=["r", "n"], prompt_tokens=[10, 5])
RESULT = GenerateResult(**ENV, job_id="j", node_id="n", text="Step 1.", tokens=3)
FAILED = JobFailedEvent(**ENV, job_id="j", node_id="n", kind="generate", reason="refused")

FIELDS = [
    (gen_jobs(DEFAULT_POOL), JOB, "content", CONTENTS),
    (SCORE_JOBS, SCORE, "content", CONTENTS),
    (query_inbox("q", SINGLE), RESULT, "finish_reason", FINISH_REASONS),
    (query_inbox("q", SINGLE), FAILED, "kind", JOB_KINDS),
]


def _with(message, **fields) -> bytes:
    """`message` as a producer with other values would write it (the encoder checks nothing)."""
    return msgspec.msgpack.encode({**msgspec.msgpack.decode(encode(message)), **fields})


def test_a_generate_request_with_an_unknown_content_fails_to_decode_naming_the_field():
    with pytest.raises(ProtocolError) as err:
        decode(gen_jobs(DEFAULT_POOL), _with(JOB, content="bogus"))
    reason = str(err.value)
    assert reason.startswith("content: ") and "'bogus'" in reason, reason
    assert "synthetic, real" in reason and "GenerateRequest" in reason


@pytest.mark.parametrize(("stream", "message", "field", "values"), FIELDS, ids=[f[2] for f in FIELDS])
def test_every_value_of_a_set_decodes_and_no_other(stream, message, field, values):
    for value in values:
        assert getattr(decode(stream, _with(message, **{field: value})), field) == value
    with pytest.raises(ProtocolError, match=f"^{field}: "):
        decode(stream, _with(message, **{field: "bogus"}))


def test_a_synthetic_style_outside_its_set_fails_to_decode_naming_the_extension():
    for style in SIM_STYLES:
        assert decode(
            gen_jobs(DEFAULT_POOL), _with(JOB, synthetic={"seed": 1, "style": style})
        ).synthetic == Synthetic(1, style)
    with pytest.raises(ProtocolError, match="^synthetic: "):
        decode(gen_jobs(DEFAULT_POOL), _with(JOB, synthetic={"seed": 1, "style": "bogus"}))


def test_each_job_request_names_its_kind_and_the_kinds_are_the_set():
    assert (GenerateRequest.job_kind, ScoreRequest.job_kind) == ("generate", "score")
    assert {GenerateRequest.job_kind, ScoreRequest.job_kind} == set(JOB_KINDS)
    assert "job_kind" not in msgspec.msgpack.decode(encode(JOB))  # not on the wire


def test_the_tuples_are_the_types_values():
    assert CONTENTS == get_args(Content) == ("synthetic", "real")
    assert MODES == ("baseline", "spex")


def test_a_score_request_with_the_old_reward_field_still_decodes():
    # Written by a service from before ScoreRequest.reward was dropped: the field is ignored.
    assert decode(SCORE_JOBS, _with(SCORE, reward="prm")) == SCORE
    assert "reward" not in msgspec.msgpack.decode(encode(SCORE))


def test_a_submission_with_a_bad_mode_decodes_to_be_answered_as_rejected():
    payload = _with(SubmitQuestionRequest(**ENV, question="1+1?"), mode="fast", algorithm="Best-First")
    req = decode(INGRESS, payload)
    with pytest.raises(submission.SubmissionError, match="^algorithm: "):
        submission.validate(req)
