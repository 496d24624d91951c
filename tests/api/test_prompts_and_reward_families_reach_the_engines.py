"""A prompt and a reward model's family given to `spex.evaluate` reach the benchmark's
configuration, the one place the engines read them from (`_evaluate.bench_config`)."""

from __future__ import annotations

import spex
from spex._evaluate import bench_config


def test_a_prompt_and_a_family_reach_the_configuration(tmp_path):
    prompt = spex.Prompt(preset="search-and-learn", system_prompt="Solve it.", step_delimiter="\n\n")
    reward = spex.Reward.served("http://prm:8001", model=str(tmp_path), prm_kind="plus-minus",
                                tokens=("good", "bad"), chat=True)  # fmt: skip
    cfg = bench_config(2, engine=spex.Engine.vllm("http://gen:8000", model=str(tmp_path)), reward=reward,
                       prompt=prompt)  # fmt: skip
    assert (cfg.prompt_preset, cfg.system_prompt, cfg.step_delimiter) == (
        "search-and-learn",
        "Solve it.",
        "\n\n",
    )
    assert (cfg.prm_kind, cfg.prm_tokens, cfg.prm_chat, cfg.prm_engine) == (
        "plus-minus",
        ("good", "bad"),
        True,
        "vllm",
    )
    assert cfg.reward_format().kind == "plus-minus"


def test_the_defaults_are_spex_s_own_prompt_and_the_token_classifier():
    cfg = bench_config(2)
    assert (cfg.prompt_preset, cfg.system_prompt, cfg.chat_template, cfg.step_delimiter) == (
        "spex",
        "",
        "",
        "",
    )
    assert cfg.prm_kind == "token-classification"
