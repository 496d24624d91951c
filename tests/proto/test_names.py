"""Every Redis name is built and parsed in proto/names.py; each stream or key says what it carries."""

import pytest

from spex.proto import (
    AnswerResult,
    GenerateRequest,
    ScoreResult,
    SubmitQuestionRequest,
    WorkerLoadEvent,
    names,
)
from spex.proto.names import KEYS, STREAMS, Name, message_types


@pytest.mark.parametrize(
    ("name", "ident", "text"),
    [
        (names.query_inbox, "q00001", "{q:q00001}:in"),
        (names.reply_key, "ab12", "{q:ab12}:answer"),
        (names.query_lease, "q1", "{q:q1}:lease"),
        (names.gen_jobs, names.DEFAULT_POOL, "gen:jobs:default"),
        (names.worker_load, "gen-0", "worker:gen-0:load"),
        (names.dead_letter, "{q:q1}:in", "dlq:{q:q1}:in"),
        (names.submitted_key, "client/with:colons", "submitted:client/with:colons"),
    ],
)
def test_a_name_is_built_and_parsed_back(name, ident, text):
    assert name(ident) == text
    assert name.parse(text) == ident
    assert name.parse(text.encode()) == ident  # as Redis returns it


def test_a_name_of_another_family_does_not_parse():
    assert names.query_inbox.parse("{q:q1}:answer") is None
    assert names.query_inbox.parse(names.dead_letter(names.query_inbox("q1"))) is None
    assert names.worker_load.parse("worker:gen-0") is None


def test_the_glob_matches_the_family():
    assert names.worker_load.glob == "worker:*:load"
    with pytest.raises(ValueError, match="<id>"):
        Name("no placeholder")


@pytest.mark.parametrize(
    ("name", "carried"),
    [
        (names.INGRESS, SubmitQuestionRequest),
        (names.gen_jobs("gpu3"), GenerateRequest),
        (names.query_inbox("q9"), ScoreResult),
        (names.reply_key("q9"), AnswerResult),
        (names.query_request("q9"), SubmitQuestionRequest),
        (names.worker_load("gen-7"), WorkerLoadEvent),
    ],
)
def test_concrete_names_resolve_to_their_family_types(name, carried):
    assert carried in message_types(name)


def test_an_unregistered_name_has_no_types():
    with pytest.raises(ValueError, match="no message types"):
        message_types("no:such:stream")


def test_no_two_families_claim_one_name():
    samples = [f("x") if isinstance(f, Name) else f for table in (STREAMS, KEYS) for f in table]
    for sample in samples:
        claims = [
            f
            for table in (STREAMS, KEYS)
            for f in table
            if f == sample or (isinstance(f, Name) and f.parse(sample))
        ]
        assert len(claims) == 1, (sample, claims)
