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


# ---------------------------------------------------------------------------- partitions
@pytest.fixture
def eight_partitions():
    names.use_partitions(8)
    yield
    names.use_partitions(1)


def test_one_partition_keeps_every_name_as_written():
    assert names.placed(names.INGRESS, "q1") == "ingress:new"
    assert names.spread(names.SCORE_JOBS) == ["score:jobs"]
    assert names.home(names.GEN_WORKERS) == "gen:workers"
    assert names.query_inbox("q1") == "{q:q1}:in"


def test_a_querys_keys_and_its_parts_of_the_global_streams_share_one_slot(eight_partitions):
    from redis.crc import key_slot

    qid, client_key = "q00042", names.submitted_key("alice/{weird key")
    keys = [
        names.query_inbox(qid), names.reply_key(qid), names.query_lease(qid), names.query_sent(qid),
        names.dead_letter(names.query_inbox(qid)), names.placed(names.INGRESS, qid),
        names.placed(names.gen_jobs(names.DEFAULT_POOL), qid),
        names.placed(names.worker_jobs("default", "g-1"), qid),
        names.placed(names.ANSWERS, qid), names.placed(names.COORDINATORS_ACTIVE, qid),
        names.placed(client_key, qid), names.dead_letter(names.placed(names.SCORE_JOBS, qid)),
    ]  # fmt: skip
    assert len({key_slot(k.encode()) for k in keys}) == 1, keys
    assert names.query_inbox.parse(names.query_inbox(qid)) == qid  # the tag does not get in the way
    assert names.placed(names.query_inbox(qid), "other") == names.query_inbox(qid)  # placed already


def test_a_client_key_that_looks_placed_still_lands_in_its_querys_slot(eight_partitions):
    from redis.crc import key_slot

    qid = "q00042"  # not in partition 3 or 5
    assert names.partition(qid) not in (3, 5)
    home_slot = key_slot(names.query_request(qid).encode())
    for client_key in ("alice/k:{p3}", "alice/{p5}k", "alice/{x}", "alice/100%{"):
        key = names.placed(names.submitted_key(client_key), qid)
        assert key_slot(key.encode()) == home_slot, key
        assert names.submitted_key.parse(key) == client_key  # escaped, not lost
    assert key_slot(names.placed(names.client_in_flight("team:{p3}"), qid).encode()) == home_slot


def test_readers_see_every_part_and_each_part_carries_its_streams_messages(eight_partitions):
    parts = names.spread(names.gen_jobs(names.DEFAULT_POOL))
    assert parts == [f"gen:jobs:default:{{p{k}}}" for k in range(8)]
    assert {names.logical(p) for p in parts} == {"gen:jobs:default"}
    assert names.message_types(parts[3]) == names.message_types("gen:jobs:default")
    assert names.logical(names.query_inbox("q1")) == "{q:q1}:in"
    assert len({names.partition(f"q{i:05d}") for i in range(200)}) == 8  # a stable hash spreads them


def test_a_partition_count_out_of_range_is_refused():
    with pytest.raises(ValueError, match="partitions"):
        names.use_partitions(0)
