"""The engine in a worker thread, as the services run it: completions come back to the event
loop, and a request the engine refuses ends as an error instead of ending the service."""

import asyncio

from spex.shared.content.prompts import prompt_pieces
from spex.shared.engine.api import UNTIL_STOP, EngineRequest
from spex.shared.hf.engine import HFEngine
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
