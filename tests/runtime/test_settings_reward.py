"""What rewards a step is a setting (`SPEX_REWARD`): explicit, or settled by the content and the
reward model given; a reward that cannot be computed is refused in one line naming what it
needs, and a reward model's URL and the engines' URLs are checked as lists."""

import pytest

from spex.shared.runtime.settings import Settings

REAL = {"engine": "vllm", "engine_url": "http://gen:8000", "content": "real"}


@pytest.mark.parametrize(
    ("given", "reward"),
    [
        ({}, "prm"),  # synthetic content: the simulated PRM
        (REAL, "logprob"),  # real content, no reward model: the generator's own log-probabilities
        (REAL | {"prm": "/models/prm"}, "prm"),
        (REAL | {"prm_url": "http://prm:8001"}, "prm"),  # a served one alone is enough
        (REAL | {"prm_url": "http://prm:8001", "reward": "logprob"}, "logprob"),  # explicit wins
        ({"prm": "/models/prm", "reward": "prm"}, "prm"),
    ],
)
def test_the_step_reward_is_the_setting_or_settled_by_content_and_reward_model(given, reward):
    assert Settings(**given).step_reward == reward


def test_the_environment_sets_it():
    env = {"SPEX_ENGINE": "vllm", "SPEX_ENGINE_URL": "http://gen:8000", "SPEX_CONTENT": "real"}
    assert Settings.from_env(env | {"SPEX_REWARD": "logprob"}).reward == "logprob"
    assert (
        Settings.from_env(env | {"SPEX_PRM_URL": "http://p:1", "SPEX_PRM_ENGINE": "vllm"}).prm_engine
        == "vllm"
    )


@pytest.mark.parametrize(
    ("given", "names"),
    [
        (REAL | {"reward": "prm"}, ["SPEX_REWARD", "SPEX_PRM", "SPEX_PRM_URL", "--prm DIR", "--prm-url URL"]),
        ({"reward": "logprob"}, ["SPEX_REWARD", "real content only"]),  # synthetic content has no log-probs
        ({"reward": "best"}, ["SPEX_REWARD", "'best'"]),
        ({"prm_url": "http://a:1,http://b:1"}, ["SPEX_PRM_URL", "one http:// or https:// URL"]),
        ({"prm_url": "prm:8001"}, ["SPEX_PRM_URL"]),
        ({"prm_engine": "tgi"}, ["SPEX_PRM_ENGINE", "vllm or sglang"]),
        (REAL | {"engine_url": "http://a:1,b:2"}, ["SPEX_ENGINE_URL", "comma-separated"]),
        (REAL | {"engine_url": " , "}, ["SPEX_ENGINE_URL"]),
    ],
)
def test_a_reward_or_url_that_cannot_work_is_one_line_naming_what_it_needs(given, names):
    with pytest.raises(ValueError) as refused:
        Settings(**given)
    message = str(refused.value)
    assert "\n" not in message and all(name in message for name in names), message


def test_several_engine_urls_are_one_setting():
    assert Settings(**REAL | {"engine_url": "http://a:8000, http://b:8000"}).engine_url.count("http") == 2
