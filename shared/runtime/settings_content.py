"""Real content's settings: the prompt a deployment writes (a preset, a system prompt, a chat
template, a step delimiter: `spex.shared.content.prompt_style`) and the reward model's family
(`spex.shared.content.reward_prompts`). Rows of `Settings` (settings.py), which extends this
class; declared as its rows are."""

from __future__ import annotations

from dataclasses import dataclass

from spex.proto import PROMPT_PRESETS, PromptFormat
from spex.proto.submission import MAX_PROMPT_TEXT_CHARS, MAX_STEP_DELIMITER_CHARS
from spex.shared.content.prompt_style import check_chat_template, prompt_format, template_text
from spex.shared.content.reward_prompts import PRM_KINDS, PrmKind, RewardFormat
from spex.shared.runtime.settings_schema import setting

__all__ = ["ContentSettings"]


def _template_ok(value: str) -> bool:
    try:
        check_chat_template(template_text(value))
    except ValueError:
        return False
    return True


def _tokens_ok(value: str) -> bool:
    try:
        RewardFormat(tokens=RewardFormat.parse_tokens(value))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class ContentSettings:
    prompt_preset: str = setting(
        "spex",
        env="SPEX_PROMPT_PRESET",
        help="real content: the prompt's preset: spex (SPEX's instruction and worked example, steps at "
        "SPEX_STEP_SPLIT) or search-and-learn (its system prompt, steps ending at a blank line); the "
        "settings below replace its texts, and a question may name its own",
        check=lambda v, _: v in PROMPT_PRESETS,
        allowed=" or ".join(PROMPT_PRESETS),
    )
    system_prompt: str = setting(
        "",
        env="SPEX_SYSTEM_PROMPT",
        help="real content: the system turn, in place of SPEX's instruction and worked example (empty: "
        "the preset's)",
        check=lambda v, _: len(v) <= MAX_PROMPT_TEXT_CHARS,
        allowed=f"at most {MAX_PROMPT_TEXT_CHARS:,} characters",
    )
    chat_template: str = setting(
        "",
        env="SPEX_CHAT_TEMPLATE",
        help="real content: the generator's chat template (Jinja), or the path of a file holding it, in "
        "place of its tokenizer's (empty: the tokenizer's)",
        check=lambda v, _: not v or _template_ok(v),
        allowed="a Jinja chat template, or the path of a file holding one",
    )
    step_delimiter: str = setting(
        "",
        env="SPEX_STEP_DELIMITER",
        help="real content: what ends a step, the generation's stop string and the prompt's join between "
        "steps, in place of SPEX_STEP_SPLIT's (empty: the preset's, else the split's)",
        check=lambda v, _: len(v) <= MAX_STEP_DELIMITER_CHARS,
        allowed=f"at most {MAX_STEP_DELIMITER_CHARS} characters",
    )
    prm_kind: PrmKind = setting(
        "token-classification",
        env="SPEX_PRM_KIND",
        help="the reward model's family: token-classification (a two-label head read at a step's last "
        "token), step-tag (Qwen2ForProcessRewardModel: read at a step tag) or plus-minus (a causal LM's "
        "good/bad token logits at a step tag: Math-Shepherd, RLHFlow)",
        check=lambda v, s: v in PRM_KINDS and (v != "plus-minus" or not s.prm_url or s.prm_engine == "vllm"),
        allowed=f"{', '.join(PRM_KINDS)}; plus-minus served by vllm only (SGLang pools no token logits)",
    )
    prm_step_tag: str = setting(
        "",
        env="SPEX_PRM_STEP_TAG",
        help="step-tag, plus-minus: the tag written after each step (empty: the family's, `<extra_0>` "
        "or `ки`)",
        check=lambda v, _: len(v) <= MAX_STEP_DELIMITER_CHARS,
        allowed=f"at most {MAX_STEP_DELIMITER_CHARS} characters",
    )
    prm_tokens: str = setting(
        "+,-",
        env="SPEX_PRM_TOKENS",
        help="plus-minus: the good and the bad token, GOOD,BAD (texts such as +,- or good,bad; or ids)",
        check=lambda v, _: _tokens_ok(v),
        allowed="GOOD,BAD: two different tokens",
    )
    prm_chat: bool = setting(
        False,
        env="SPEX_PRM_CHAT",
        help="plus-minus: the path as a chat, each step a user turn the good token answers (RLHFlow's "
        "PRMs), instead of the steps after the question, each with the step tag (Math-Shepherd)",
        check=lambda v, s: not v or s.prm_kind == "plus-minus",
        allowed="only with SPEX_PRM_KIND=plus-minus",
    )

    def prompt(self) -> PromptFormat:
        """The deployment's prompt: the preset's, with each text set here in its place (a chat
        template named by its file read now)."""
        return prompt_format(
            self.prompt_preset, self.system_prompt, template_text(self.chat_template), self.step_delimiter
        )

    def reward_format(self) -> RewardFormat:
        """How the reward model reads a path."""
        tokens = RewardFormat.parse_tokens(self.prm_tokens)
        return RewardFormat(self.prm_kind, self.prm_step_tag, tokens, self.prm_chat)
