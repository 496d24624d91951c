"""A bad argument to `spex.evaluate` is a ValueError of one line naming it, before anything runs:
an engine named without its model or server, a reward the engine cannot take, an unknown
search, mode or field."""

import pytest

import spex


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"engine": "hf"}, "engine: 'hf' needs its model or server: pass Engine.hf(MODEL_DIR)"),
        ({"engine": "tgi"}, "engine: 'sim' or an Engine"),
        ({"reward": "prm-please"}, "reward: 'logprob', 'simulated' or a Reward"),
        ({"reward": spex.Reward.prm("/models/prm")}, "reward: the sim engine's steps are synthetic"),
        ({"reward": spex.Reward.served("http://prm:1")}, "reward: the sim engine's steps are synthetic"),
        (
            {"algorithm": "dfs"},
            "algorithm: one of beam, best_of_n, dvts, ets, rebase, rest, rstar, not 'dfs'",
        ),  # noqa: E501
        ({"mode": "fast"}, "mode: one of baseline, spex, compare, not 'fast'"),
        ({"target": 0}, "target"),
        ({"questions": 0}, "questions: at least 1, not 0"),
        ({"batch_size": 0}, "batch_size: must be at least 1"),
        ({"knobs": {"colour": 1}}, "colour"),
        ({"params": {"no_such_param": 1.0}}, "no_such_param"),
        (
            {"reward": spex.Reward("prm", prm_kind="orm")},
            "reward.prm_kind: a PRM's family, one of token-classification, step-tag, plus-minus",
        ),
    ],
)
def test_a_bad_argument_is_one_line_naming_it(kwargs, said):
    with pytest.raises(ValueError) as caught:
        spex.evaluate(**{"questions": 2, "progress": False, **kwargs})
    assert said in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("engine", "reward", "said"),
    [
        (spex.Engine.hf("/m"), spex.Reward.simulated(), "the simulated PRM scores the synthetic workload"),
        (
            spex.Engine.hf("/m"),
            spex.Reward.served("http://p:1"),
            "a served PRM (Reward.served) goes with a served generator",
        ),
        (
            spex.Engine.vllm("http://g:1"),
            spex.Reward.prm("/prm"),
            "a server's steps are scored by Reward.served(URL)",
        ),
    ],
)
def test_a_reward_the_engine_cannot_take_is_refused(engine, reward, said):
    with pytest.raises(ValueError, match=said.replace("(", "\\(").replace(")", "\\)")):
        spex.evaluate(["What is 1 + 1?"], engine=engine, reward=reward, progress=False)


def test_a_real_engine_needs_questions_and_a_model_directory(tmp_path):
    with pytest.raises(ValueError, match="dataset: the hf engine needs questions"):
        spex.evaluate(engine=spex.Engine.hf(str(tmp_path)), progress=False)
    with pytest.raises(ValueError, match="is not a model directory"):
        spex.evaluate(["What is 1 + 1?"], engine=spex.Engine.hf(str(tmp_path)), progress=False)
    with pytest.raises(ValueError, match="step_split: one of blank-line, newline, numbered"):
        spex.Prompt(step_split="comma")  # type: ignore[arg-type]
