"""A payload that does not decode names its bad field first — a nested value's top field, an
unknown message type as `type` with the stream's known ones — and anything else (a field
missing) as msgspec says it."""

import msgspec
import pytest

from spex.proto import ProtocolError, decode, encode
from spex.proto.names import DEFAULT_POOL, SINGLE, gen_jobs, query_inbox
from tests.proto.examples import ENV, JOB


def _reason(stream: str, raw: dict) -> str:
    with pytest.raises(ProtocolError) as err:
        decode(stream, msgspec.msgpack.encode(raw))
    return str(err.value)


def _job(**fields) -> dict:
    return {**msgspec.msgpack.decode(encode(JOB)), **fields}


def test_a_bad_item_of_a_list_names_the_list():
    reason = _reason(gen_jobs(DEFAULT_POOL), _job(prompt_tokens=[10, "x"]))
    assert reason.startswith("prompt_tokens: Expected `int`, got `str`"), reason
    assert reason.endswith("(invalid GenerateRequest on gen:jobs:default)"), reason


def test_the_first_bad_field_in_the_payload_is_the_one_named():
    reason = _reason(gen_jobs(DEFAULT_POOL), _job(seed="s", content="bogus"))
    assert reason.startswith("seed: "), reason


def test_an_unknown_type_is_named_with_the_streams_known_ones():
    reason = _reason(query_inbox("q", SINGLE), {**ENV, "type": "NoSuchThing"})
    assert reason.startswith("type: unknown 'NoSuchThing'; known: GenerateResult, ScoreResult"), reason


def test_a_missing_field_reads_as_msgspec_says():
    reason = _reason(query_inbox("q", SINGLE), {**ENV, "type": "ScoreResult", "job_id": "j", "node_id": "n"})
    assert reason == "invalid ScoreResult on {q:q}:in: Object missing required field `reward`"
