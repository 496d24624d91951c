"""The engine in a worker thread, as the services run it: completions come back to the event
loop, a request the engine refuses ends as an error instead of ending the service, and a
promotion reaches the engine at its next step."""

import asyncio

from spex.proto import PRIMARY, SPECULATIVE
from spex.shared.content.prompts import prompt_pieces
from spex.shared.engine.api import UNTIL_STOP, EngineRequest
from spex.shared.hf.engine import HFConfig, HFEngine
from spex.shared.hf.threaded import ThreadedEngine


def test_completions_and_refusals_come_back_to_the_event_loop(tiny_model):
    engine = HFEngine.from_dir(tiny_model)
    pieces = tuple(prompt_pieces("What is 2+2?", [], engine.template))

    async def go():
        runner, stop, done = ThreadedEngine(engine), asyncio.Event(), []

        async def on_complete(c):
            done.append(c)
            if len(done) == 2:
                stop.set()

        task = asyncio.create_task(runner.run(on_complete, stop))
        runner.submit(EngineRequest("ok", (("p", 1),), "o", UNTIL_STOP, 8, 0, 1, 1.0, (), pieces))
        runner.submit(EngineRequest("bad", (("p", 1),), "o", UNTIL_STOP, 8))  # no prompt text
        await asyncio.wait_for(task, timeout=30)
        return {c.rid: c for c in done}, runner.load()

    done, load = asyncio.run(go())
    assert done["ok"].reason == "finished" and done["ok"].generated == 8
    assert done["bad"].reason == "error" and "prompt text" in done["bad"].text
    assert load.running == 0 and load.waiting == 0


def test_a_promoted_waiting_request_is_admitted_before_an_earlier_speculative_one(tiny_model):
    engine = HFEngine.from_dir(tiny_model, HFConfig(max_running=1))  # one at a time: order shows
    pieces = tuple(prompt_pieces("What is 2+2?", [], engine.template))

    def request(rid: str, priority: int) -> EngineRequest:
        return EngineRequest(rid, (("p", 1),), f"o-{rid}", 6, 8, priority, 1, 1.0, (), pieces)

    async def go(promote: bool) -> list[str]:
        runner, stop, done = ThreadedEngine(engine), asyncio.Event(), []

        async def on_complete(c):
            done.append(c.rid)
            if len(done) == 3:
                stop.set()

        task = asyncio.create_task(runner.run(on_complete, stop))
        runner.submit(request("primary", PRIMARY))
        runner.submit(request("spec-first", SPECULATIVE))
        runner.submit(request("spec-later", SPECULATIVE))
        if promote:
            runner.promote("spec-later")
        await asyncio.wait_for(task, timeout=30)
        return done

    assert asyncio.run(go(promote=False)) == ["primary", "spec-first", "spec-later"]
    assert asyncio.run(go(promote=True)) == ["primary", "spec-later", "spec-first"]
