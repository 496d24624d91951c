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
from spex.proto.names import KEYS, SINGLE, STREAMS, Family, Name, Partitions, QueryName, message_types


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
    if isinstance(name, Name):
        assert name(ident) == text
        assert name.parse(text) == ident
        assert name.parse(text.encode()) == ident  # as Redis returns it
    else:  # a query's or a client's: built with the deployment's partitions
        assert name(ident, SINGLE) == text
        parsed = name.parse(text) if isinstance(name, QueryName) else name.parse(text, SINGLE)
        assert parsed == ident


def test_a_name_of_another_family_does_not_parse():
    assert names.query_inbox.parse("{q:q1}:answer") is None
    assert names.query_inbox.parse(names.dead_letter(names.query_inbox("q1", SINGLE))) is None
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
        (names.query_inbox("q9", SINGLE), ScoreResult),
        (names.reply_key("q9", SINGLE), AnswerResult),
        (names.query_request("q9", Partitions(4)), SubmitQuestionRequest),
        (names.worker_load("gen-7"), WorkerLoadEvent),
    ],
)
def test_concrete_names_resolve_to_their_family_types(name, carried):
    assert carried in message_types(name)


def test_an_unregistered_name_has_no_types():
    with pytest.raises(ValueError, match="no message types"):
        message_types("no:such:stream")


def test_no_two_families_claim_one_name():
    samples = [
        f("x") if isinstance(f, Name) else f("x", SINGLE) if isinstance(f, QueryName) else f
        for table in (STREAMS, KEYS)
        for f in table
    ]
    for sample in samples:
        claims = [
            f
            for table in (STREAMS, KEYS)
            for f in table
            if f == sample or (isinstance(f, Name | QueryName) and f.parse(sample))
        ]
        assert len(claims) == 1, (sample, claims)


# ---------------------------------------------------------------------------- partitions
EIGHT = Partitions(8)


def test_one_partition_keeps_every_name_as_written():
    one = Partitions(1)
    assert one == SINGLE
    assert one.placed(names.INGRESS, "q1") == "ingress:new"
    assert one.spread(names.SCORE_JOBS) == ["score:jobs"]
    assert one.home(names.GEN_WORKERS) == "gen:workers"
    assert names.query_inbox("q1", one) == "{q:q1}:in"
    assert names.query_inbox.glob(one) == "{q:*}:in"
    assert names.client_in_flight("team:{x}", one) == "ingress:inflight:team:{x}"


def test_a_querys_keys_and_its_parts_of_the_global_streams_share_one_slot():
    from redis.crc import key_slot

    p, qid = EIGHT, "q00042"
    client_key = names.submitted_key("alice/{weird key", p)
    keys = [
        names.query_inbox(qid, p), names.reply_key(qid, p), names.query_lease(qid, p),
        names.query_sent(qid, p),
        names.dead_letter(names.query_inbox(qid, p)), p.placed(names.INGRESS, qid),
        p.placed(names.gen_jobs(names.DEFAULT_POOL), qid),
        p.placed(names.worker_jobs("default", "g-1"), qid),
        p.placed(names.ANSWERS, qid), p.placed(names.COORDINATORS_ACTIVE, qid),
        p.placed(client_key, qid), names.dead_letter(p.placed(names.SCORE_JOBS, qid)),
    ]  # fmt: skip
    assert len({key_slot(k.encode()) for k in keys}) == 1, keys
    assert names.query_inbox.parse(names.query_inbox(qid, p)) == qid  # the tag does not get in the way
    assert p.placed(names.query_inbox(qid, p), "other") == names.query_inbox(qid, p)  # placed already
    assert names.query_inbox.glob(p) == "{p*}{q:*}:in"


def test_a_client_key_that_looks_placed_still_lands_in_its_querys_slot():
    from redis.crc import key_slot

    p, qid = EIGHT, "q00042"  # not in partition 3 or 5
    assert p.partition(qid) not in (3, 5)
    home_slot = key_slot(names.query_request(qid, p).encode())
    for client_key in ("alice/k:{p3}", "alice/{p5}k", "alice/{x}", "alice/100%{"):
        key = p.placed(names.submitted_key(client_key, p), qid)
        assert key_slot(key.encode()) == home_slot, key
        assert names.submitted_key.parse(key, p) == client_key  # escaped, not lost
    assert key_slot(p.placed(names.client_in_flight("team:{p3}", p), qid).encode()) == home_slot


def test_readers_see_every_part_and_each_part_carries_its_streams_messages():
    parts = EIGHT.spread(names.gen_jobs(names.DEFAULT_POOL))
    assert parts == [f"gen:jobs:default:{{p{k}}}" for k in range(8)]
    assert {names.logical(p) for p in parts} == {"gen:jobs:default"}
    assert names.message_types(parts[3]) == names.message_types("gen:jobs:default")
    assert names.logical(names.query_inbox("q1", EIGHT)) == "{q:q1}:in"
    assert len({EIGHT.partition(f"q{i:05d}") for i in range(200)}) == 8  # a stable hash spreads them


def test_a_partition_count_out_of_range_is_refused():
    for count in (0, 16385):
        with pytest.raises(ValueError, match="partitions"):
            Partitions(count)
    assert all(isinstance(f, Family) for table in (STREAMS, KEYS) for f in table if not isinstance(f, str))
