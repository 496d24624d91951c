"""Requests for the in-process engine (a question and the steps before it, as prompt pieces),
and a loop that runs the engine until it is idle."""

from spex.proto.messages import PRIMARY
from spex.shared.content.prompts import prompt_pieces
from spex.shared.engine.api import UNTIL_STOP, EngineRequest


def request(engine, rid, seed, question="What is $1+1$?", steps=(), priority=PRIMARY, max_new=24, stop=()):
    """Request `rid` of `question` after `steps`, its prompt pieces as `engine`'s template
    lays them out."""
    pieces = tuple(prompt_pieces(question, list(steps), engine.template))
    prompt = tuple((f"{rid}/{i}", 1) for i in range(len(pieces)))
    return EngineRequest(rid, prompt, rid, UNTIL_STOP, max_new, priority, seed, 1.0, tuple(stop), pieces)


def drain(engine):
    """Run the engine until it is idle; completions in the order they finished."""
    out = []
    while (t := engine.next_event_s()) is not None:
        out += engine.advance_to(t)
    return out
