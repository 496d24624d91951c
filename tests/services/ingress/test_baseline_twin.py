"""Lossless, checked through the API: a question asked with `baseline_twin` is searched twice,
with speculation and without (same question, seed and search), and its answer reports both
trees' digests and whether they are the same. Every answer says what answered it."""

import asyncio
import time

from spex.proto.names import SINGLE
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import http, wait_http


def test_a_twin_searches_the_same_tree_and_the_answer_says_so(redis_url):
    port = free_port()
    # Wide enough that a level outlasts the allocator's round: a REBASE-4 level can end before
    # the budget granted for its offers arrives, and whether it speculates at all then turns on
    # the phase of the rounds (the check below needs it to).
    asked = {"question": "What is 12 * 13?", "algorithm": "rebase", "target": 16, "seed": 7}

    async def go():
        cluster = Cluster(redis_url, "inprocess", http_port=port)
        await cluster.start("ingress", "ingress-0")
        await cluster.start_all()
        base = f"http://127.0.0.1:{port}/v1/questions"
        try:
            await asyncio.to_thread(wait_http, f"{base}/none")
            refused = await asyncio.to_thread(
                http, "POST", base, {**asked, "baseline_twin": True, "mode": "baseline"}
            )
            early = await asyncio.to_thread(
                http, "POST", base, {**asked, "baseline_twin": True, "early_stop": True}
            )
            first = await asyncio.to_thread(
                http, "POST", base, {**asked, "baseline_twin": True, "client_key": "k"}
            )
            again = await asyncio.to_thread(
                http, "POST", base, {**asked, "baseline_twin": True, "client_key": "k"}
            )
            plain = [await asyncio.to_thread(http, "POST", base, asked) for _ in range(2)]
            qids = [first[1]["query_id"], *(p[1]["query_id"] for p in plain)]
            done = {}
            deadline = time.monotonic() + 60
            while len(done) < len(qids) and time.monotonic() < deadline:
                for qid in qids:
                    got = await asyncio.to_thread(http, "GET", f"{base}/{qid}")
                    twin_pending = got[1].get("baseline_twin", {}).get("status") == "searching"
                    if got[0] == 200 and not twin_pending:
                        done[qid] = got[1]
                await asyncio.sleep(0.1)
            twin = await asyncio.to_thread(http, "GET", f"{base}/{qids[0]}.baseline")
            return refused, early, first, again, [done.get(q) for q in qids], twin
        finally:
            await cluster.stop()

    refused, early, first, again, (answer, *plain), twin = asyncio.run(go())
    assert refused[0] == 400 and refused[1]["error"].startswith("baseline_twin: ")
    assert early[0] == 400 and "early_stop" in early[1]["error"]
    assert first[0] == 202 and again == first  # a retried submission: one question, one twin
    assert answer is not None and answer["status"] == "answered", answer
    pair = answer["baseline_twin"]
    assert pair["query_id"] == first[1]["query_id"] + ".baseline" and pair["status"] == "answered"
    assert pair["lossless"] is True and pair["tree_digest"] == answer["tree_digest"]
    assert pair["answer"] == answer["answer"]
    # The twin is a plain search; the question itself speculated (else the check shows nothing).
    assert twin[0] == 200 and twin[1]["speculative_issued"] == 0 and answer["speculative_issued"] > 0
    # Without a twin, the same question and seed grow another tree: a tree is keyed by its query.
    assert all(p is not None and "baseline_twin" not in p for p in plain)
    assert plain[0]["tree_digest"] != plain[1]["tree_digest"]
    served = answer["served_by"]
    assert served["engine"] == "sim" and served["content"] == "synthetic" and served["reward"] == "sim-prm"
    assert served["demonstration"].startswith("a demonstration: synthetic content on a simulated GPU")


def test_a_twin_refused_withdraws_its_question_and_cancel_reaches_both(redis_url):
    from spex.proto import Limits, names
    from spex.shared.runtime.client import IngressClient
    from spex.shared.runtime.connect import redis_client
    from spex.shared.runtime.refusals import Backpressure
    from spex.shared.runtime.settings import Settings

    async def go():
        settings = Settings(redis_url=redis_url)
        full = IngressClient(redis_client(settings), limits=Limits(client_in_flight=1), partitions=SINGLE)
        roomy = IngressClient(redis_client(settings), partitions=SINGLE)
        try:
            await full.r.flushall()
            try:  # the question fits the client's limit, its twin does not
                await full.submit("1+1?", client_key="k", client="c", baseline_twin=True)
                refused = None
            except Backpressure as exc:
                refused = str(exc)
            # Neither is kept: the key is free again (a new question under it), the first cancelled.
            inboxes = [key async for key in full.r.scan_iter("*:in")]
            qid = await roomy.submit("1+1?", client_key="k", client="c", baseline_twin=True)
            await roomy.cancel(qid)  # the twin with it
            cancelled = [await roomy.r.xlen(names.query_inbox(q, SINGLE)) for q in (qid, f"{qid}.baseline")]
            return refused, len(inboxes), qid, cancelled
        finally:
            await full.aclose()
            await roomy.aclose()

    refused, inboxes, qid, cancelled = asyncio.run(go())
    assert refused is not None and refused.endswith(
        "(its baseline twin was refused: the question is withdrawn)"
    )
    assert inboxes == 1  # the withdrawn question's cancel
    assert qid and cancelled == [1, 1]
