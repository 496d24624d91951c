"""The one line that says what a deployment runs on: engine, content and reward, in words a
user reads (no credentials from a URL)."""

import pytest

from spex.shared.runtime.settings import Settings
from spex.shared.runtime.stack import describe_stack

VLLM = {"engine": "vllm", "engine_url": "http://a:8000,http://b:8000", "content": "real", "model": "/m/smol"}


@pytest.mark.parametrize(
    ("given", "line"),
    [
        (
            {},
            "engine: simulated GPU, content synthetic (a demonstration: synthetic content on a simulated "
            "GPU, not a model's text or answer), reward: simulated PRM",
        ),
        (
            VLLM,
            "engine: vllm at http://a:8000, http://b:8000 (model /m/smol), content real, "
            "reward: the model's own log-probabilities",
        ),
        (
            VLLM | {"prm_url": "http://user:secret@prm:8001", "prm_engine": "vllm"},
            "engine: vllm at http://a:8000, http://b:8000 (model /m/smol), content real, "
            "reward: prm via vLLM at http://prm:8001",
        ),
        (
            {"engine": "hf", "model": "/m/smol", "content": "real", "prm": "/m/prm"},
            "engine: hf in process (model /m/smol), content real, reward: prm in process (model /m/prm)",
        ),
        (
            {"engine": "sglang", "engine_url": "http://g:30000", "prm_url": "http://p:30001"},
            "engine: sglang at http://g:30000, content synthetic (a demonstration: synthetic content on "
            "the sglang engine, not a model's text or answer), "
            "reward: simulated PRM (its passes timed on the reward model via SGLang at http://p:30001)",
        ),
    ],
)
def test_the_stack_is_said_in_one_line(given, line):
    assert describe_stack(Settings(**given)) == line
