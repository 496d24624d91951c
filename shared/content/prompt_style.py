"""How a question and its steps are written for a model, beyond the words: the split (where a
step ends), a system prompt, a chat template and a step delimiter — and the named presets.

The defaults, stated once (docs/guides/prompts.md shows them):
- split `newline` (`DEFAULT_SPLIT`): one step a line; its delimiter `\\n` is the generation's
  stop string and joins the path's steps in the prompt;
- no system prompt: SPEX's instruction is the system turn and a worked example is an earlier
  exchange (`spex.shared.content.prompts`);
- no chat template of one's own: the generator's tokenizer's (plain text where it has none);
- no step delimiter of one's own: the split's.
A system prompt replaces the instruction and the example (the turns are then the system prompt
and the question, as search-and-learn writes them); a step delimiter replaces the split's in the
stop strings, the prompt's joins and the example; a chat template replaces the tokenizer's.

Presets (`PRESETS`): `spex` is the defaults; `search-and-learn` is search-and-learn's system
prompt with steps ending at a blank line (huggingface/search-and-learn, `src/sal/config.py`:
`Config.system_prompt`; its searches stop each step at `"\\n\\n"`). A deployment's settings pick a
preset and may replace any of its texts; a question may pick another preset (which replaces the
deployment's prompt as a whole) and replace texts again (`question_format`).

A chat template is a Jinja template as transformers renders them (`messages`,
`add_generation_prompt`); one given to a deployment may be the path of a file holding it
(`template_text`), one given with a question is the text itself. It is rendered in a sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from spex.proto.messages import PROMPT_PRESETS, PromptFormat, PromptPreset, Split, SubmitQuestionRequest

if TYPE_CHECKING:
    from jinja2 import Template

__all__ = [
    "DEFAULT_SPLIT",
    "DEFAULT_STYLE",
    "PRESETS",
    "PROMPT_PRESETS",
    "SEARCH_AND_LEARN_SYSTEM_PROMPT",
    "PromptStyle",
    "carried_format",
    "check_chat_template",
    "prompt_format",
    "question_format",
    "render_chat",
    "template_text",
]

# The default split: the best measured for SmolLM2-135M on the easy set (docs/journal/real-model.md).
DEFAULT_SPLIT: Split = "newline"
_DELIMITERS: dict[Split, str] = {"blank-line": "\n\n", "newline": "\n", "numbered": "\n"}
_NUMBERED = 30  # numbered steps the stop strings know ("\n2." to "\n30.")

# search-and-learn's `Config.system_prompt` (huggingface/search-and-learn, src/sal/config.py,
# Apache-2.0), character for character: accuracies compare only under the same prompt.
SEARCH_AND_LEARN_SYSTEM_PROMPT = (
    "Solve the following math problem efficiently and clearly:\n\n"
    "- For simple problems (2 steps or fewer):\nProvide a concise solution with minimal explanation.\n\n"
    "- For complex problems (3 steps or more):\nUse this step-by-step format:\n\n"
    "## Step 1: [Concise description]\n[Brief explanation and calculations]\n\n"
    "## Step 2: [Concise description]\n[Brief explanation and calculations]\n\n...\n\n"
    "Regardless of the approach, always conclude with:\n\n"
    "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.\n\n"
    "Where [answer] is just the final number or expression that solves the problem."
)
PRESETS: dict[PromptPreset, PromptFormat] = {
    "spex": PromptFormat(),
    "search-and-learn": PromptFormat(system_prompt=SEARCH_AND_LEARN_SYSTEM_PROMPT, step_delimiter="\n\n"),
}
assert tuple(PRESETS) == PROMPT_PRESETS, "a preset's texts for every name the wire knows"


@dataclass(frozen=True)
class PromptStyle:
    """A split and the texts that replace SPEX's own ("" each: SPEX's)."""

    split: Split = DEFAULT_SPLIT
    system_prompt: str = ""
    chat_template: str = ""
    step_delimiter: str = ""

    @classmethod
    def of(cls, split: Split, prompt: PromptFormat) -> PromptStyle:
        """A job's style: its split and its prompt (`GenerateRequest.prompt`)."""
        return cls(split, prompt.system_prompt, prompt.chat_template, prompt.step_delimiter)

    @property
    def format(self) -> PromptFormat:
        return PromptFormat(self.system_prompt, self.chat_template, self.step_delimiter)

    @property
    def delimiter(self) -> str:
        """What follows each step of the path in a prompt."""
        return self.step_delimiter or _DELIMITERS[self.split]

    @property
    def own_delimiter(self) -> bool:
        """A delimiter other than the split's."""
        return bool(self.step_delimiter) and self.step_delimiter != _DELIMITERS[self.split]

    def stop_strings(self) -> tuple[str, ...]:
        """The strings that end a generated step."""
        if self.step_delimiter:
            return (self.step_delimiter,)
        if self.split == "numbered":
            return tuple(f"\n{n}." for n in range(2, _NUMBERED + 1))
        return (_DELIMITERS[self.split],)

    def without_template(self) -> PromptStyle:
        """The style another model (a reward model) reads the path in: the chat template is
        the generator's, never another tokenizer's."""
        return replace(self, chat_template="")


DEFAULT_STYLE = PromptStyle()


def prompt_format(
    preset: str = "spex", system_prompt: str = "", chat_template: str = "", step_delimiter: str = ""
) -> PromptFormat:
    """A deployment's prompt: the preset's, with each text given in its place."""
    if preset not in PRESETS:
        raise ValueError(f"prompt_preset: one of {', '.join(PRESETS)}, not {preset!r}")
    base = PRESETS[preset]  # type: ignore[index]
    return PromptFormat(
        system_prompt or base.system_prompt,
        chat_template or base.chat_template,
        step_delimiter or base.step_delimiter,
    )


def question_format(deployment: PromptFormat, question: SubmitQuestionRequest) -> PromptFormat:
    """A question's prompt: its preset replaces the deployment's prompt as a whole, then each
    of its texts replaces the one before."""
    base = PRESETS.get(question.prompt_preset, deployment)  # type: ignore[call-overload]
    return PromptFormat(
        question.system_prompt or base.system_prompt,
        question.chat_template or base.chat_template,
        question.step_delimiter or base.step_delimiter,
    )


def carried_format(settled: PromptFormat, question: SubmitQuestionRequest) -> PromptFormat:
    """What a job carries of its question's prompt (`question_format`'s `settled`): the texts the
    question did not give itself. Its own (a system prompt, a chat template: up to
    `MAX_PROMPT_TEXT_CHARS` each) are in its stored request, read by a worker once a query
    (which settles the prompt again by `question_format`), not copied into each of the jobs queued at once."""
    return PromptFormat(
        "" if question.system_prompt else settled.system_prompt,
        "" if question.chat_template else settled.chat_template,
        settled.step_delimiter,
    )


def template_text(value: str) -> str:
    """A deployment's chat template: the text of the file `value` names, else `value` itself
    (as vLLM's `--chat-template` takes either)."""
    if value and "{" not in value and len(value) < 4096:
        path = Path(value).expanduser()
        if path.is_file():
            return path.read_text()
        raise ValueError(f"chat_template: {value!r} is neither a file nor a Jinja template")
    return value


@lru_cache(maxsize=64)
def _compiled(text: str) -> Template:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(text)


def check_chat_template(text: str) -> None:
    """ValueError naming `chat_template` (and the line) if `text` is not a Jinja template."""
    from jinja2.exceptions import TemplateSyntaxError

    try:
        _compiled(text)
    except TemplateSyntaxError as exc:
        raise ValueError(f"chat_template: line {exc.lineno}: {exc.message}") from None


def render_chat(text: str, turns: list[dict[str, str]], generation_prompt: bool = True) -> str:
    """`turns` through the chat template `text`, where no tokenizer is at hand (a server's
    prompts without its tokenizer): no special tokens are known, so `bos_token` and
    `eos_token` render empty. A template's own refusal raises ValueError."""
    from jinja2.exceptions import TemplateError

    check_chat_template(text)
    try:
        return str(
            _compiled(text).render(
                messages=turns, add_generation_prompt=generation_prompt, bos_token="", eos_token=""
            )
        )
    except TemplateError as exc:
        raise ValueError(f"chat_template: {exc}") from None
