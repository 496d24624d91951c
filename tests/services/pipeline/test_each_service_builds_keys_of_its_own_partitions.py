"""A service builds every key with the partition count it was built with, whatever another in
the same process was built with: two stacks of real services (a coordinator, a generator, a
scorer, an allocator and the ingress client each) run side by side in one process, one with
one partition and one with four, each on its own database of one real Redis. Every command
either sends (MONITOR sees the keys of Lua scripts' own calls too) names only keys of its own
count: on one partition no key carries a partition's tag; on four, every key of a global
stream or set is one of its four parts and every query's key carries its query's partition.
Both answer the same questions with the same trees."""

import asyncio
import re
import threading
from urllib.parse import urlsplit

import redis
from redis.crc import key_slot

from spex.proto import names
from spex.proto.names import Partitions
from tests.services.cluster import Cluster
from tests.services.workload import submit_all

DB = {1: 1, 4: 2}  # partition count -> the database its stack uses
END = "monitor:end"  # written last: the monitor stops when it sees it
QUESTIONS = 3

# The names the code keeps whole however many partitions there are (one of each a deployment).
WHOLE = {names.ALLOCATOR_LEASE, names.ALLOCATOR_STATUS, names.INGRESS_READY, END}
GLOBAL = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)} - WHOLE - {
    names.DEFAULT_POOL, names.COORDINATOR_GROUP, names.GENERATOR_GROUP, names.SCORER_GROUP,
}  # fmt: skip
QUERY_FAMILIES = [v for v in vars(names).values() if isinstance(v, names.QueryName)]
CLIENT_FAMILIES = [v for v in vars(names).values() if isinstance(v, names.ClientName)]
TAG = re.compile(r"^\{p(\d+)\}|:\{p(\d+)\}$")


def kind(token: str) -> str | None:
    """What SPEX key `token` is ("global", "query:<id>", "client"), or None if it is none."""
    text = names.logical(token)
    for family in QUERY_FAMILIES:
        qid = family.parse(text)
        if qid is not None:
            return f"query:{qid}"
    if text in GLOBAL or names.gen_jobs.parse(text) is not None or names.worker_load.parse(text):
        return "global"
    if names.dead_letter.parse(text) is not None:
        return kind(names.dead_letter.parse(text) or "")
    if any(f.parse(text, Partitions(1)) is not None for f in CLIENT_FAMILIES):
        return "client"
    return None


def wrong_keys(tokens: list[str], parts: Partitions) -> list[str]:
    """The keys among `tokens` not of `parts`' count."""
    return [token for token in tokens if not _of(token, parts)]


def _of(token: str, parts: Partitions) -> bool:
    what, tag = kind(token), TAG.search(token)
    k = int(tag.group(1) or tag.group(2)) if tag else None
    if parts.count == 1:
        return k is None  # no key of one partition carries a tag
    if what is None:
        return True  # not a key SPEX names
    if k is None or k >= parts.count:
        return False
    return not what.startswith("query:") or k == parts.partition(what.removeprefix("query:"))


def monitor(url: str, seen: dict[int, list[str]], ready: threading.Event) -> None:
    """Every argument of every command each database is sent, until END is written to both."""
    client = redis.Redis.from_url(url)
    ended = set()
    with client.monitor() as m:
        ready.set()
        for command in m.listen():
            db, args = int(command["db"]), command["command"].split(" ")
            seen.setdefault(db, []).extend(args)
            if END in args:
                ended.add(db)
                if ended >= set(DB.values()):
                    break
    client.close()


def test_two_stacks_in_one_process_each_build_the_keys_of_their_own_count(redis_url):
    base = redis_url.rstrip("/").rsplit("/", 1)[0] if urlsplit(redis_url).path not in ("", "/") else redis_url
    seen: dict[int, list[str]] = {}
    ready = threading.Event()
    watcher = threading.Thread(target=monitor, args=(redis_url, seen, ready), daemon=True)
    watcher.start()
    assert ready.wait(10)

    async def go():
        stacks = {
            count: Cluster(f"{base.rstrip('/')}/{db}", "inprocess", partitions=count, lease_s=2.0)
            for count, db in DB.items()
        }
        try:
            for stack in stacks.values():
                await stack.start_all()
            answers = await asyncio.gather(
                *(submit_all(stack, "rebase", 4, QUESTIONS, "spex") for stack in stacks.values())
            )
            for stack in stacks.values():
                await stack.client.r.set(END, 1)
            return dict(zip(stacks, answers, strict=True))
        finally:
            for stack in stacks.values():
                await stack.stop()

    answers = asyncio.run(go())
    watcher.join(10)
    assert not watcher.is_alive(), "the monitor never saw the end of both runs"
    for count, db in DB.items():
        assert all(a is not None and not a.error for a in answers[count].values()), answers[count]
        tokens = seen.get(db, [])
        assert any(kind(t) for t in tokens), f"no SPEX key seen on db {db}"
        assert wrong_keys(tokens, Partitions(count)) == [], f"{count} partition(s): keys of another count"
    four = {kind(t) for t in seen[DB[4]] if TAG.search(t)}
    assert "global" in four and any(str(w).startswith("query:") for w in four)
    slots = {key_slot(t.encode()) for t in seen[DB[4]] if (kind(t) or "").startswith("query:")}
    assert len(slots) > 1  # the queries' keys spread over partitions
    digests = {c: {q: (a.answer, a.tree_digest) for q, a in answers[c].items()} for c in DB}
    assert digests[1] == digests[4]  # the same trees however the keys are split
