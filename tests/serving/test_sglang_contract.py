"""The SGLang backend against SGLang's own structures (sglang 0.5.23): every request SPEX
sends is parsed and normalised by sglang's request classes, every server flag it checks is a
field of sglang's ServerArgs, and every finish reason sglang writes is read as SPEX means it.

SGLang's server needs a GPU; its request classes do not. Skipped where sglang is not installed
(the project does not install it: ~11 GB). Run it with `make test-sglang`.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from spex.shared.engine.api import UNTIL_STOP, EngineRequest
from spex.shared.serving.backend import EngineMisconfigured
from spex.shared.serving.sglang import SGLangBackend, required_flags

io_struct = pytest.importorskip("sglang.srt.managers.io_struct", reason="sglang is not installed")
sampling = pytest.importorskip("sglang.srt.sampling.sampling_params")
server_args = pytest.importorskip("sglang.srt.server_args")
schedule_batch = pytest.importorskip("sglang.srt.managers.schedule_batch")

pytestmark = pytest.mark.sglang
RID = "0123456789abcdef0123456789abcdef"


def _request(output_tokens: int, priority: int = 1) -> EngineRequest:
    return EngineRequest(
        "job-1",
        (("q", 12), ("n1", 8)),
        "n2",
        output_tokens,
        max_new_tokens=64,
        priority=priority,
        seed=42,
        temperature=0.7,
        stop=("\n\n",),
        text=("Solve 1+1.\n\n", "First step.\n\n"),
    )


@pytest.fixture(scope="module")
def tokenizer():  # sglang normalises stop strings and min_new_tokens with the model's tokenizer
    from spex.shared.hf.models import train_tokenizer

    return train_tokenizer(512)


@pytest.mark.parametrize("output_tokens", [UNTIL_STOP, 17])
def test_generate_request_is_what_sglang_parses(output_tokens: int, tokenizer) -> None:
    path, body = SGLangBackend("http://x").generate(_request(output_tokens), RID)
    assert path == "/generate"
    req = io_struct.GenerateReqInput(**body)
    req.normalize_batch_and_arguments()
    assert req.rid == RID and req.priority == 1 and req.return_logprob is True and req.stream is False
    assert req.text == "Solve 1+1.\n\nFirst step.\n\n"
    params = sampling.SamplingParams(**req.sampling_params)
    params.normalize(tokenizer)
    params.verify(len(tokenizer))
    assert params.sampling_seed == 42 and params.temperature == pytest.approx(0.7)
    if output_tokens == UNTIL_STOP:
        assert params.stop_strs == ["\n\n"] and params.max_new_tokens == 64 and not params.ignore_eos
    else:  # exactly the step's tokens: synthetic content
        assert (params.max_new_tokens, params.min_new_tokens, params.ignore_eos) == (17, 17, True)


def test_abort_and_classify_requests_are_what_sglang_parses() -> None:
    backend = SGLangBackend("http://x")
    path, body = backend.abort(RID)
    assert path == "/abort_request"
    abort = io_struct.AbortReq(**body)
    assert abort.rid == RID and abort.abort_all is False
    path, body = SGLangBackend("http://x", reward=True).generate(_request(0, priority=0), RID)
    assert path == "/classify"
    req = io_struct.EmbeddingReqInput(**body)
    req.normalize_batch_and_arguments()
    assert req.rid == RID and req.text == "Solve 1+1.\n\nFirst step.\n\n"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (lambda: schedule_batch.FINISH_MATCHED_STR("\n\n"), "stop"),
        (lambda: schedule_batch.FINISH_MATCHED_TOKEN(2), "eos"),
        (lambda: schedule_batch.FINISH_LENGTH(64), "length"),
        (lambda: schedule_batch.FINISH_ABORT(), "abort"),
    ],
)
def test_finish_reasons_as_sglang_writes_them(reason, expected: str) -> None:
    body = {
        "text": "x = 2",
        "meta_info": {
            "finish_reason": reason().to_json(),
            "prompt_tokens": 20,
            "completion_tokens": 3,
            "cached_tokens": 12,
            "output_token_logprobs": [[-0.5, 11, None], [-1.5, 12, None], [-1.0, 13, None]],
        },
    }
    reply = SGLangBackend("http://x").read(_request(UNTIL_STOP), body)
    assert reply.finish == expected
    assert (reply.generated, reply.prompt_tokens, reply.cached_tokens) == (3, 20, 12)
    assert reply.logprobs == (-0.5, -1.5, -1.0)


def test_the_flags_checked_are_sglang_server_args() -> None:
    fields = server_args.ServerArgs(model_path="/nonexistent").resolved_dict()
    for reward in (False, True):
        for key in required_flags(reward, deterministic=True):
            assert key in fields, key


@pytest.mark.parametrize("reward", [False, True])
def test_check_reads_sglang_server_info_over_http(reward: bool) -> None:
    """`check` against /server_info as sglang builds it (ServerArgs.resolved_dict) over HTTP:
    the default launch lacks the flags; the documented launch passes."""
    good = {"enable_metrics": True}
    if reward:
        good["is_embedding"] = True
    else:
        good |= {"enable_priority_scheduling": True, "schedule_low_priority_values_first": True}
        good["enable_deterministic_inference"] = True
    bare = server_args.ServerArgs(model_path="/nonexistent").resolved_dict()
    full = server_args.ServerArgs(model_path="/nonexistent", **good).resolved_dict()

    async def main() -> None:
        infos = [bare, full]

        async def server_info(_: web.Request) -> web.Response:
            return web.json_response(infos[0] | {"max_total_num_tokens": 123_456}, dumps=_dumps)

        app = web.Application()
        app.router.add_get("/server_info", server_info)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        backend = SGLangBackend(f"http://127.0.0.1:{port}", reward=reward, deterministic=True)
        import aiohttp

        async with aiohttp.ClientSession() as session:
            with pytest.raises(EngineMisconfigured) as err:
                await backend.check(session)
            for flag in good:
                assert "--" + flag.replace("_", "-") in str(err.value)
            infos.pop(0)
            await backend.check(session)
        assert backend.kv_capacity == 123_456
        await runner.cleanup()

    asyncio.run(main())


def _dumps(obj: object) -> str:
    import json

    return json.dumps(obj, default=str)
