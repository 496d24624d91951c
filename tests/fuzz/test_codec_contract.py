"""The codec holds to its contract on any input: `decode` raises nothing but ProtocolError
(with a reason), what `encode` accepts round-trips on every stream or key that carries its
type, and a message decodes only where its type is carried. Pure: no Redis, no services."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spex.proto import (
    AnswerResult,
    GenerateResult,
    JobFailedEvent,
    ProtocolError,
    ScoreResult,
    decode,
    encode,
)
from spex.proto.names import KEYS, STREAMS, message_types
from tests.fuzz import strategies as fz
from tests.fuzz.harness import count

# Hypothesis warns that a falsifying example of a megabyte has a long repr: it is meant to.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

PURE = settings(
    max_examples=1_000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
NAMES = fz.concrete_names()
# Each message type, with every stream or key that carries it.
CARRIERS = {
    cls: [n for n in NAMES if cls in message_types(n)]
    for cls in fz.ALL_MESSAGES
    if any(cls in ts for table in (STREAMS, KEYS) for ts in table.values())
}


def test_every_message_type_has_a_carrier_and_a_strategy():
    assert set(CARRIERS) == set(fz.ALL_MESSAGES), "a message that no stream or key carries"
    assert {AnswerResult, GenerateResult, JobFailedEvent, ScoreResult} <= set(CARRIERS)


@PURE
@given(
    payload=st.one_of(fz.arbitrary_payload(oversize=True), fz.encoded(fz.any_message())),
    name=st.sampled_from([*NAMES, "no:such:stream", ""]),
)
def test_decode_raises_only_protocol_errors(payload, name):
    count("codec decode", 1, 1)
    try:
        msg = decode(name, payload)
    except ProtocolError as exc:
        assert str(exc), "a ProtocolError without a reason"
        return
    assert type(msg) in message_types(name)


@PURE
@given(msg=st.one_of(fz.any_message(), fz.any_message(surrogates=True)))
def test_encode_round_trips_or_raises_protocol_error(msg):
    count("codec encode", 1, 1)
    try:
        payload = encode(msg)
    except ProtocolError as exc:
        assert str(exc)
        return
    for name in CARRIERS[type(msg)]:
        back = decode(name, payload)
        assert fz.same(back, msg), f"{type(msg).__name__} changed on {name}"
        assert msgspec.msgpack.encode(back) == payload


@PURE
@given(msg=fz.any_message(), wrapper=st.sampled_from(sorted(NAMES)))
def test_a_message_decodes_only_where_its_type_is_carried(msg, wrapper):
    count("codec names", 1, 1)
    payload = msgspec.msgpack.encode(msg)
    try:
        back = decode(wrapper, payload)
    except ProtocolError:
        assert type(msg) not in message_types(wrapper) or len(payload) > fz.MAX_MESSAGE_BYTES
        return
    assert type(back) is type(msg) and fz.same(back, msg)
