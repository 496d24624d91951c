"""`spex bench`'s `--reward` defaults to prm on every engine, and its help says what that does
without a reward model: the simulated PRM on the sim and hf engines' synthetic content, a one-line
refusal on real content and on a served engine. (`spex.evaluate`'s default differs: logprob on
a real engine, as the notebook guide says.)"""

import argparse

import pytest

from spex.cli.bench_args import bench_config
from spex.cli.main import build_parser
from tests.test_docs_tell_one_story import flat, page


def _bench() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["bench"]


def _model(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    return str(tmp_path)


def test_without_a_reward_model_prm_is_the_simulated_one_on_synthetic_content_else_refused(tmp_path):
    bench = _bench()
    reward = next(a for a in bench._actions if "--reward" in a.option_strings)
    assert reward.default == "prm"
    assert "simulated PRM of --reward-profile on the sim and hf engines' synthetic content" in reward.help
    assert "refused on real content and on vllm and sglang" in reward.help
    model = _model(tmp_path)
    for engine in (["--engine", "sim"], ["--engine", "hf", "--model", model]):
        cfg = bench_config(bench.parse_args(engine))
        cfg.validate()
        assert cfg.reward == "prm" and cfg.prm is None and cfg.content == "synthetic"
    real = bench_config(bench.parse_args(["--engine", "hf", "--model", model, "--dataset", "easy"]))
    with pytest.raises(ValueError, match=r"^prm: the prm reward on real content needs --prm DIR"):
        real.validate()
    served = bench_config(bench.parse_args(["--engine", "vllm", "--engine-url", "http://127.0.0.1:1"]))
    with pytest.raises(ValueError, match=r"^prm_url: "):
        served.validate()
    assert "`spex bench` defaults to `--reward prm` on every engine" in flat(page("docs/guides/notebook.md"))
