"""`python -m spex.bench.chaos.incidents NAME`: three incidents replayed on a real pipeline (the
chaos rig: a durable Redis, every service a supervised process behind its own proxy, one
coordinator, one ingress), each counted as an operator would: questions accepted, answered
(once, or more than once under one client key), refused, never answered, and Redis's peak
memory against its cap.

- `long-prompts`: Redis capped (`--maxmemory-mb`, noeviction) and long questions (`--chars`
  characters each) of a wide search posted at once over HTTP; watched for `--watch-s`.
- `flush-stalled`: questions in flight under client keys, Redis emptied (FLUSHALL) and the
  coordinator stalled (SIGSTOP) for `--stall-s` at once; every original id read meanwhile and
  every key posted again after `--repost-s`; watched until each key's question is answered.
- `flush-ingress-restart`: the same with the ingress restarted (SIGKILL; the supervisor starts
  a new one) just after the FLUSHALL, the keys posted again to the new one.

Each writes a JSON report (`--json`) and prints its one-line summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import redis

from spex.bench.chaos.rig import Rig
from spex.proto.names import ANSWERS, SCORE_JOBS
from spex.shared.runtime.settings import Settings

__all__ = ["INCIDENTS", "long_question", "main", "run_incident"]

MB = 1_000_000
WORDS: tuple[str, ...] = ("let", "the", "sum", "of", "the", "first", "terms", "be", "found", "where")
WORDS += ("each", "term", "doubles", "and", "the", "remainder")
SAMPLE_EVERY_S = 0.25


def long_question(i: int, chars: int) -> str:
    """A question of `chars` characters, its own for each `i` (seeded filler words)."""
    rng = random.Random(i)
    head = f"Question {i}: what is {i} + {i}? "
    words = []
    size = len(head)
    while size < chars:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return (head + " ".join(words))[:chars]


def _http(
    port: int, method: str, path: str, body: object = None, timeout_s: float = 10.0
) -> tuple[int, Any, str]:
    """(status, JSON body, Retry-After) of one request to the ingress; (0, {}, "") if it is away."""
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data, {"Content-Type": "application/json"}, method=method
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read() or b"{}"), resp.headers.get("Retry-After", "")
    except urllib.error.HTTPError as exc:
        try:
            said = json.loads(exc.read() or b"{}")
        except ValueError:
            said = {}
        return exc.code, said, exc.headers.get("Retry-After", "")
    except OSError:
        return 0, {}, ""


class _Memory:
    """Redis's used memory sampled while an incident runs, and the job streams' at its peak."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.peak = 0
        self.streams: dict[str, int] = {}
        self.cap = int(cast(dict, r.config_get("maxmemory"))["maxmemory"])

    def sample(self) -> None:
        try:
            used = int(cast(dict, self.r.info("memory"))["used_memory"])
        except redis.RedisError:
            return
        if used > self.peak:
            self.peak = used
            streams = [k.decode() for k in self.r.scan_iter(match="gen:jobs:*", count=1000)]
            self.streams = {s: int(self.r.memory_usage(s, samples=0) or 0) for s in [*streams, SCORE_JOBS]}


async def _watch(rig: Rig, memory: _Memory, qids: set[str], until_s: float) -> dict[str, Any]:
    """Poll for the answers of `qids` until all are answered or `until_s` (monotonic) passes:
    {query id: its answer's (error, answer, digest)}."""
    assert rig.client is not None
    answered: dict[str, Any] = {}
    while time.monotonic() < until_s and len(answered) < len(qids):
        memory.sample()
        for qid in sorted(qids - set(answered)):
            try:
                answer = await rig.client.result(qid)
            except redis.RedisError:
                continue
            if answer is not None:
                answered[qid] = (answer.error, answer.answer, answer.tree_digest)
        await asyncio.sleep(SAMPLE_EVERY_S)
    return answered


def _log_counts(rig: Rig, name: str, events: tuple[str, ...]) -> dict[str, int]:
    text = rig.log(name)
    return {event: text.count(f'"{event}"') + text.count(f"event={event} ") for event in events}


async def long_prompts(rig: Rig, args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(rig.redis.url, password=rig.redis.password)
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", args.maxmemory_mb * MB)
    memory = _Memory(r)
    body = {"algorithm": args.algorithm, "target": args.target}
    posts = [
        await asyncio.to_thread(
            _http, rig.http_port, "POST", "/v1/questions", {"question": long_question(i, args.chars), **body}
        )
        for i in range(args.questions)
    ]
    accepted = {said["query_id"] for status, said, _ in posts if status == 202}
    refused = Counter(
        f"{status} {str(said.get('error', ''))[:60]}" for status, said, _ in posts if status != 202
    )
    ready = await asyncio.to_thread(_http, rig.http_port, "GET", "/ready")
    answered = await _watch(rig, memory, accepted, time.monotonic() + args.watch_s)
    late = await asyncio.to_thread(_http, rig.http_port, "POST", "/v1/questions", {"question": "1 + 1?"})
    report = {
        "accepted": len(accepted),
        "answered": sum(1 for error, _, _ in answered.values() if not error),
        "failed": sum(1 for error, _, _ in answered.values() if error),
        "never_answered": len(accepted - set(answered)),
        "refused": dict(refused),
        "ready_after_posts": ready[0],
        "a_new_question_after": late[0],
        "peak_used_bytes": memory.peak,
        "maxmemory_bytes": memory.cap,
        "job_streams_at_peak": memory.streams,
        "coordinator": _log_counts(rig, "coord-0", ("query_released", "query_adopted", "query_taken_over")),
    }
    r.close()
    return report


async def data_loss(rig: Rig, args: argparse.Namespace, restart_ingress: bool) -> dict[str, Any]:
    r = redis.Redis.from_url(rig.redis.url, password=rig.redis.password)
    memory = _Memory(r)
    body = {"algorithm": args.algorithm, "target": args.target}

    def post(i: int) -> tuple[int, Any, str]:
        question = {"question": f"{i} + {i}?", "client_key": f"key-{i}", **body}
        return _http(rig.http_port, "POST", "/v1/questions", question)

    first = [await asyncio.to_thread(post, i) for i in range(args.questions)]
    ids: dict[int, set[str]] = {
        i: {said["query_id"]} for i, (status, said, _) in enumerate(first) if status == 202
    }
    originals = {i: next(iter(q)) for i, q in ids.items()}
    await asyncio.sleep(args.settle_s)  # adopted by the coordinator, searching
    started = time.monotonic()
    r.flushall()
    rig.stall("coord-0")
    if restart_ingress:
        rig.kill("ingress-0")
    reads: Counter[int] = Counter()
    while time.monotonic() - started < args.repost_s:
        for qid in originals.values():
            reads[
                (await asyncio.to_thread(_http, rig.http_port, "GET", f"/v1/questions/{qid}", None, 2.0))[0]
            ] += 1
        await asyncio.sleep(0.2)
    reposted: Counter[str] = Counter()
    repost_until = started + args.stall_s + args.repost_window_s
    pending = set(ids)
    while pending and time.monotonic() < repost_until:
        for i in sorted(pending):
            status, said, retry_after = await asyncio.to_thread(post, i)
            reposted[f"{status}{' Retry-After' if retry_after else ''}"] += 1
            if status == 202:
                ids[i].add(said["query_id"])
                pending.discard(i)
        if time.monotonic() - started >= args.stall_s and "coord-0" in rig.stalled:
            rig.resume("coord-0")
        await asyncio.sleep(0.5)
    if "coord-0" in rig.stalled:
        rig.resume("coord-0")
    every = {qid for q in ids.values() for qid in q}
    answered = await _watch(rig, memory, every, time.monotonic() + args.watch_s)
    per_key = {i: [q for q in sorted(qs) if q in answered and not answered[q][0]] for i, qs in ids.items()}
    report = {
        "accepted_first": len(ids),
        "reads_while_stalled": dict(reads),
        "reposts": dict(reposted),
        "keys_with_a_second_id": sum(1 for q in ids.values() if len(q) > 1),
        "keys_searched_twice": sum(1 for q in per_key.values() if len(q) > 1),
        "keys_answered_once": sum(1 for q in per_key.values() if len(q) == 1),
        "accepted_ids": len(every),
        "ids_never_answered": sorted(every - set(answered)),
        "ids_failed": sum(1 for error, _, _ in answered.values() if error),
        "pairs_differing": sum(
            1 for q in per_key.values() if len(q) > 1 and len({answered[x][2] for x in q}) > 1
        ),
        "answers_stream": int(r.xlen(ANSWERS)),
    }
    r.close()
    return report


INCIDENTS = {
    "long-prompts": long_prompts,
    "flush-stalled": lambda rig, args: data_loss(rig, args, restart_ingress=False),
    "flush-ingress-restart": lambda rig, args: data_loss(rig, args, restart_ingress=True),
}
DEFAULTS = {  # the sizes the incidents were first seen at
    "long-prompts": {"questions": 60, "target": 64, "time_scale": 0.02, "watch_s": 360.0},
    "flush-stalled": {"questions": 50, "target": 64, "time_scale": 0.05, "watch_s": 300.0},
    "flush-ingress-restart": {"questions": 20, "target": 64, "time_scale": 0.05, "watch_s": 300.0},
}


async def run_incident(name: str, args: argparse.Namespace, say: object = print) -> dict[str, object]:
    settings = replace(Settings(), time_scale=args.time_scale, lease_s=3.0)
    counts = {"coordinator": 1, "generator": args.generators, "ingress": 1}
    workdir = Path(args.keep) if args.keep else None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    rig = Rig(settings, counts=counts, workdir=workdir, say=say)
    rig.start()
    try:
        await asyncio.to_thread(rig.wait_started)
        t0 = time.monotonic()
        report = await INCIDENTS[name](rig, args)
        report = {
            "incident": name,
            **{k: v for k, v in vars(args).items() if k not in ("json", "keep")},
            **report,
        }
        report["wall_s"] = round(time.monotonic() - t0, 1)
        return report
    finally:
        rig.heal_all()
        rig.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spex.bench.chaos.incidents", description=__doc__.split("\n")[0]
    )
    p.add_argument("incident", choices=sorted(INCIDENTS))
    p.add_argument("--questions", type=int, default=None)
    p.add_argument("--algorithm", default="rebase")
    p.add_argument("--target", type=int, default=None)
    p.add_argument("--chars", type=int, default=98_000, help="long-prompts: each question's length")
    p.add_argument("--maxmemory-mb", type=int, default=25, help="long-prompts: Redis's cap")
    p.add_argument("--time-scale", type=float, default=None)
    p.add_argument("--generators", type=int, default=2)
    p.add_argument("--watch-s", type=float, default=None, help="how long answers are waited for")
    p.add_argument("--settle-s", type=float, default=3.0, help="data loss: in flight this long before it")
    p.add_argument("--stall-s", type=float, default=10.0, help="data loss: how long the coordinator stalls")
    p.add_argument("--repost-s", type=float, default=6.5, help="data loss: when the keys are posted again")
    p.add_argument(
        "--repost-window-s", type=float, default=60.0, help="data loss: re-posts retried this long"
    )
    p.add_argument("--json", default=None)
    p.add_argument("--keep", default=None, help="keep the services' logs in this directory")
    args = p.parse_args(argv)
    for key, value in DEFAULTS[args.incident].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    report = asyncio.run(run_incident(args.incident, args, say=lambda m: print(m, file=sys.stderr)))
    line = json.dumps(report)
    print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
