"""A reward model on vLLM's pooling API, through the serving engine, against a server speaking
that API (`fake_vllm_pooling`): what a request carries, how each shape of answer becomes a
reward (checked against the softmax and sigmoid written out here), the server checked at start
(one line naming the flag or the selector), and an abort that closes the connection."""

from __future__ import annotations

import asyncio
import math

import pytest

from spex.shared.engine.api import EngineRequest
from spex.shared.serving import open_engine
from spex.shared.serving.backend import EngineMisconfigured, reward_of
from tests.serving.driving import SPECULATIVE, driving
from tests.serving.fake_vllm_pooling import MODEL, fake_pooling, token_logits, tokens
from tests.serving.test_serving_engine import fake_sglang


def score(rid: str, *pieces: str, priority: int = 0) -> EngineRequest:
    """A score job as the scorer writes it: the path's text in pieces, no tokens to generate."""
    req = EngineRequest(rid, (("q", 8),), f"{rid}/s", 0, priority=priority)
    req.text = pieces
    return req


def p_right(logits: list[float]) -> float:
    wrong, right = logits
    return 1.0 / (1.0 + math.exp(wrong - right))


async def scored(rows: str, *requests: EngineRequest) -> tuple[list, list]:
    async with fake_pooling(rows=rows) as server:
        e = open_engine("vllm", server.url, 10.0, reward=True)
        async with driving(e) as d:
            for r in requests:
                e.submit(r)
            done = await d.wait(*(r.rid for r in requests), timeout_s=10.0)
        return done, server.bodies


def test_a_step_is_scored_at_its_last_token_from_the_raw_logits() -> None:
    path = ("Question: 2 + 3?\n\n", "2 + 3 = 5.\n\n")
    done, bodies = asyncio.run(
        scored("token", score("primary", *path), score("spec", "Question: 1?\n\n", priority=SPECULATIVE))
    )
    text = "".join(path)
    [c, _] = done
    assert c.reason == "finished" and c.reward == pytest.approx(p_right(token_logits(tokens(text)[-1])))
    assert c.prompt_tokens == len(tokens(text))
    probe, first, second = bodies  # the check's probe, then the two jobs
    assert probe["priority"] == 1
    assert {k: v for k, v in first.items() if k != "request_id"} == {
        "model": MODEL,
        "input": text,
        "priority": 0,
        "use_activation": False,  # logits: SPEX squashes them itself, whatever the pooler's default
        "add_special_tokens": False,  # tokenized as the in-process reward model tokenizes it
    }
    assert second["priority"] == SPECULATIVE
    assert len(first["request_id"]) == 32 and first["request_id"] != second["request_id"]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ("sequence", lambda last: p_right(token_logits(last))),  # one row of two: P(right)
        ("score", lambda last: 1.0 / (1.0 + math.exp(-token_logits(last)[1]))),  # one score: a sigmoid
    ],
)
def test_one_row_for_the_whole_text_is_read_as_the_reward(rows, expected) -> None:
    done, _ = asyncio.run(scored(rows, score("a", "Question: 7 * 6?\n\n", "42.\n\n")))
    assert done[0].reward == pytest.approx(expected(tokens("Question: 7 * 6?\n\n42.\n\n")[-1]))


def test_a_reward_is_a_probability_even_far_from_zero_and_none_without_a_number() -> None:
    assert reward_of([-1000.0]) == pytest.approx(0.0) and reward_of([1000.0]) == pytest.approx(1.0)
    assert reward_of([[0.0, 0.0], [1000.0, -1000.0]]) == pytest.approx(0.0)
    assert reward_of([float("nan")]) is None and reward_of([]) is None and reward_of(None) is None


@pytest.mark.parametrize(
    ("server", "says"),
    [
        ({"pooling": False}, "serve the reward model with --runner pooling"),
        ({"priority": False}, "start it with --scheduling-policy priority"),
        ({"rows": "embedding"}, "gives 64 numbers a row, not a reward"),
        ({"pooling": False, "owner": "sglang"}, "the server is SGLang's: set SPEX_PRM_ENGINE=sglang"),
    ],
)
def test_a_server_that_cannot_score_is_refused_at_start_in_one_line(server, says) -> None:
    async def main() -> str:
        async with fake_pooling(**server) as fake:
            e = open_engine("vllm", fake.url, 10.0, reward=True)
            with pytest.raises(EngineMisconfigured) as refused:
                await e.start(wait_s=5.0)
            await e.close()
            return str(refused.value)

    message = asyncio.run(main())
    assert "\n" not in message and message.startswith("vllm at http://127.0.0.1:") and says in message


def test_sglangs_reward_path_at_a_vllm_server_names_the_selector() -> None:
    async def main() -> str:
        async with fake_pooling() as fake:
            e = open_engine("sglang", fake.url, 10.0, reward=True)
            with pytest.raises(EngineMisconfigured) as refused:
                await e.start(wait_s=5.0)
            await e.close()
            return str(refused.value)

    assert asyncio.run(main()).endswith("the server is vLLM's: set SPEX_PRM_ENGINE=vllm")


def test_an_sglang_server_still_passes_sglangs_check() -> None:
    async def main() -> None:
        async with fake_sglang() as server:
            e = open_engine("sglang", server.url, 10.0)
            await e.start(wait_s=5.0)
            await e.close()

    asyncio.run(main())


def test_an_abort_closes_the_connection_which_stops_the_request_there() -> None:
    async def main() -> tuple[list, list[str], list[str]]:
        async with fake_pooling() as server:
            e = open_engine("vllm", server.url, 10.0, reward=True)
            async with driving(e) as d:
                e.submit(score("held", "hold: a long path"))
                await d.until(lambda: len(server.bodies) == 2, 5.0, "the request at the server")
                ended = e.abort("held")  # no call to make: it ends here and now
                sent = server.bodies[-1]["request_id"]
                await d.until(lambda: server.gone, 5.0, "the server seeing the client go")
            return ended, server.gone, [sent]

    ended, gone, sent = asyncio.run(main())
    assert [c.reason for c in ended] == ["abort"] and gone == sent
