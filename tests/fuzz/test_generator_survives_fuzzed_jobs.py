"""Wire fuzzing of the generator: extreme-but-valid messages and arbitrary bytes on its job
stream (gen:jobs:default) and its control stream (gen:control), against the real service
in-process on a real Redis, checked after each batch as `tests/fuzz/harness.py` says; jobs
one field off a job that runs are dead-lettered with that field named."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spex.proto import CancelRequest, GenerateRequest, Synthetic, encode
from spex.proto.names import DEFAULT_POOL, GEN_CONTROL, GENERATOR_GROUP, gen_jobs
from tests.fuzz import strategies as fz
from tests.fuzz.harness import CASES, DRAIN_S, FUZZ, NOTES, Fuzz, as_text, count, entry_order

# Hypothesis warns that a falsifying example of a megabyte has a long repr: it is meant to.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


def test_generator_survives_fuzzed_jobs_and_cancellations(fuzz):
    test = "generator gen:jobs:default + gen:control"
    stream = gen_jobs(DEFAULT_POOL)
    fuzz.start(("generator", "gen-0"))
    gen = fuzz.service("gen-0")
    known = fuzz.known_queries(3)
    ids = ["j-0", "j-1", "n-0", "root", known[0]]

    def running() -> set[str]:  # called on the loop
        return gen.held()

    everything = seed_jobs_one_field_off(fuzz, stream, known[0], running)

    @FUZZ
    @given(
        jobs=fz.entry_batches((GenerateRequest, CancelRequest), ids, known),
        control=st.lists(fz.entry_fields((CancelRequest,), ids, known), max_size=5),
    )
    def case(jobs, control):
        since = len(fuzz.logs)
        added = fuzz.add(stream, jobs)
        if control:
            sent = fuzz.add(GEN_CONTROL, control)
            control_read_to(fuzz, gen, sent[-1][0])
        fuzz.drained(stream, GENERATOR_GROUP, added, held=running)
        fuzz.check_dead_letters(stream, added)
        fuzz.healthy(since)
        everything.extend(added)
        count(test, 1, len(jobs) + len(control))

    case()
    fuzz.drained(stream, GENERATOR_GROUP, everything)  # nothing left running, nothing pending
    NOTES[test] = f"gen-0: {gen.summary()}"
    fuzz.answered(("coordinator", "coord-0"), ("scorer", "scorer-0"), ("allocator", "allocator-0"))
    assert CASES[test]["examples"] >= 25


def seed_jobs_one_field_off(fuzz: Fuzz, stream: str, qid: str, running) -> list[tuple[str, dict[str, bytes]]]:
    """The seed entries, then jobs the fuzzing found the generator crashing or failing on, each
    one field off a job that runs (behind a long one, so the engine is busy decoding when they
    arrive): each is dead-lettered with a reason that names its field. The entries added."""
    job = _job(qid)
    bad = {
        "synthetic": msgspec.structs.replace(job, job_id="j-style", synthetic=Synthetic(1, "zigzag")),
        "prompt_tokens": msgspec.structs.replace(
            job, job_id="j-empty", prompt_node_ids=["root"], prompt_tokens=[0], max_new_tokens=1
        ),
    }
    seeded = fuzz.seeded(
        stream, GENERATOR_GROUP, [{"e": encode(job)}, *({"e": encode(m)} for m in bad.values())], held=running
    )
    reasons = {as_text(f[b"id"]): f[b"reason"].decode() for f in fuzz.dead_letters(stream).values()}
    for (entry_id, _), field in zip(seeded[-len(bad) :], bad):
        assert reasons.get(entry_id, "").startswith(f"{field}:"), (field, reasons.get(entry_id))
    return seeded


def control_read_to(fuzz: Fuzz, gen, last: str) -> None:
    """Wait until the generator read the control stream to entry `last`."""

    async def go() -> bool:
        deadline = asyncio.get_running_loop().time() + DRAIN_S
        while asyncio.get_running_loop().time() < deadline:
            (seen,) = gen._control_last.values()  # one partition: one part to read
            if seen != "$" and entry_order(as_text(seen)) >= entry_order(last):
                return True
            await asyncio.sleep(0.02)
        return False

    assert fuzz.run(go()), "the generator did not read the control stream to its end"


def _job(qid: str) -> GenerateRequest:
    """A generation job of the synthetic workload the generator runs (a long one)."""
    return GenerateRequest(
        msg_id=f"{qid}/j-long/gen",
        query_id=qid,
        job_id="j-long",
        node_id="n-long",
        parent_id="root",
        child_index=0,
        action="expand",
        prompt_node_ids=["root"],
        prompt_tokens=[300],
        seed=1,
        max_new_tokens=256,
        synthetic=Synthetic(seed=1),
    )
