"""The prompt and reward-family settings: read from their variables and from `spex up`'s flags (a
chat template from a file), settled into the deployment's prompt and the reward model's format;
a bad value is one line naming the variable (and the flag)."""

import pytest

from spex.cli.main import build_parser
from spex.cli.runtime import up_settings
from spex.proto import PromptFormat
from spex.shared.content.prompt_style import SEARCH_AND_LEARN_SYSTEM_PROMPT
from spex.shared.content.reward_prompts import RewardFormat
from spex.shared.runtime.settings import Settings

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def test_the_variables_set_the_deployments_prompt(tmp_path):
    path = tmp_path / "chat.jinja"
    path.write_text(TEMPLATE)
    env = {
        "SPEX_PROMPT_PRESET": "search-and-learn",
        "SPEX_CHAT_TEMPLATE": str(path),
        "SPEX_STEP_DELIMITER": "\n\nStep:",
    }
    s = Settings.from_env(env)
    assert s.prompt() == PromptFormat(SEARCH_AND_LEARN_SYSTEM_PROMPT, TEMPLATE, "\n\nStep:")
    assert Settings.from_env({"SPEX_SYSTEM_PROMPT": "Be terse."}).prompt() == PromptFormat("Be terse.")


def test_the_variables_set_the_reward_models_family():
    env = {"SPEX_PRM_KIND": "plus-minus", "SPEX_PRM_TOKENS": "good,bad", "SPEX_PRM_CHAT": "1"}
    assert Settings.from_env(env).reward_format() == RewardFormat("plus-minus", "", ("good", "bad"), True)
    step_tag = Settings.from_env({"SPEX_PRM_KIND": "step-tag", "SPEX_PRM_STEP_TAG": "<step>"}).reward_format()
    assert step_tag.tag == "<step>" and RewardFormat("step-tag").tag == "<extra_0>"


@pytest.mark.parametrize(
    ("env", "start"),
    [
        ({"SPEX_PROMPT_PRESET": "sal"}, "SPEX_PROMPT_PRESET (prompt_preset): invalid value 'sal'"),
        ({"SPEX_CHAT_TEMPLATE": "/no/such.jinja"}, "SPEX_CHAT_TEMPLATE (chat_template): invalid value"),
        ({"SPEX_CHAT_TEMPLATE": "{% if %}"}, "SPEX_CHAT_TEMPLATE (chat_template): invalid value"),
        ({"SPEX_STEP_DELIMITER": "#" * 65}, "SPEX_STEP_DELIMITER (step_delimiter): invalid value"),
        ({"SPEX_PRM_KIND": "outcome"}, "SPEX_PRM_KIND (prm_kind): invalid value 'outcome'"),
        ({"SPEX_PRM_TOKENS": "+"}, "SPEX_PRM_TOKENS (prm_tokens): invalid value '+'"),
        (
            {"SPEX_PRM_CHAT": "1"},
            "SPEX_PRM_CHAT (prm_chat): invalid value True; only with SPEX_PRM_KIND=plus-minus",
        ),
        (
            {"SPEX_PRM_KIND": "plus-minus", "SPEX_PRM_URL": "http://prm:1", "SPEX_CONTENT": "real"},
            "SPEX_PRM_KIND (prm_kind): invalid value 'plus-minus'",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(env, start):
    with pytest.raises(ValueError) as refused:
        Settings.from_env(env)
    assert str(refused.value).startswith(start) and "\n" not in str(refused.value), refused.value


def test_spex_ups_flags_set_them_and_name_themselves(tmp_path):
    path = tmp_path / "chat.jinja"
    path.write_text(TEMPLATE)
    args = ["up", "--prompt-preset", "search-and-learn", "--system-prompt", "Be terse.",
            "--chat-template", str(path), "--step-delimiter", "\n###\n", "--prm-kind", "step-tag",
            "--prm-step-tag", "<s>"]  # fmt: skip
    s = up_settings(build_parser().parse_args(args))
    assert s.prompt() == PromptFormat("Be terse.", TEMPLATE, "\n###\n")
    assert s.reward_format() == RewardFormat("step-tag", "<s>")
    with pytest.raises(ValueError, match=r"^--chat-template / SPEX_CHAT_TEMPLATE \(chat_template\)"):
        up_settings(build_parser().parse_args(["up", "--chat-template", "/no/such.jinja"]))
