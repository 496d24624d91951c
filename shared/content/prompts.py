"""How a search's path becomes a model's prompt, and how a model's output becomes a step.

A prompt is built in pieces: the head (the instruction, a worked example and the question,
through the tokenizer's chat template where it has one) and then each step on the path followed by the
step delimiter. A child's prompt is therefore its parent's prompt plus one piece, which is
what lets an engine's prefix cache reuse the parent's KV piece by piece. A model writes one
step per generation: it stops at one of the style's stop strings, at its end-of-sequence
token, or at the step's token limit (`max_new_tokens`).

Where a step ends is the split (`Split`), the same for the prompt's example, its instruction,
the delimiter between the path's steps and the generation's stop strings:
- `blank-line`: a step is a paragraph; steps are separated by an empty line.
- `newline`: a step is one line.
- `numbered`: a step is a numbered line ("2. ...") with any unnumbered lines after it; the
  next step starts at the next line that begins with a number and a full stop.
A stop string met before a step's `min_tokens` does not end it (the step goes on): a model
that writes a heading or a one-word line does not make a step of it. A style
(`spex.shared.content.prompt_style.PromptStyle`) adds to the split a system prompt, a chat
template and a step delimiter of one's own; its defaults are SPEX's prompt, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from spex.proto.messages import SPLITS, Split
from spex.shared.content.prompt_style import DEFAULT_SPLIT, DEFAULT_STYLE, PromptStyle, render_chat

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_SPLIT",
    "DEFAULT_STYLE",
    "DEFAULT_TEMPERATURE",
    "EXAMPLE_QUESTION",
    "EXAMPLE_STEPS",
    "SPLITS",
    "PromptStyle",
    "SizedPrompt",
    "Split",
    "Template",
    "chat_template",
    "delimiter",
    "example_solution",
    "filler",
    "fewest_words",
    "instruction",
    "plain_template",
    "prompt_pieces",
    "stop_strings",
    "style_of",
]

# Real content's sampling temperature: the best measured for SmolLM2-135M on the easy set
# (docs/journal/real-model.md).
DEFAULT_TEMPERATURE = 0.3
_HOW: dict[Split, str] = {
    "blank-line": "Write one short step per paragraph and leave a blank line between steps",
    "newline": "Write one short step per line",
    "numbered": "Number the steps and write each on its own line",
}
_OWN_HOW = "Write one short step at a time and separate the steps as the example does"
# The format is taught by a worked example, never by a placeholder a model would copy (told to
# "write the final answer as \\boxed{answer}", a small model writes exactly that). With a chat
# template the example is an earlier exchange, which a small model follows far better than an
# example inside the instruction (which it repeats).
EXAMPLE_QUESTION = "A box holds 3 red pens and 5 blue pens. How many pens are in the box?"
EXAMPLE_STEPS = (
    "The box holds 3 red pens and 5 blue pens.",
    "Together that is 3 + 5 = 8 pens.",
    "The answer is \\boxed{8}.",
)


def style_of(style: PromptStyle | Split) -> PromptStyle:
    """A style, or a split's style (SPEX's prompt with that split)."""
    return style if isinstance(style, PromptStyle) else PromptStyle(style)


def delimiter(style: PromptStyle | Split = DEFAULT_SPLIT) -> str:
    """What follows each step of the path in a prompt."""
    return style_of(style).delimiter


def stop_strings(style: PromptStyle | Split = DEFAULT_SPLIT) -> tuple[str, ...]:
    """The strings that end a generated step."""
    return style_of(style).stop_strings()


def instruction(style: PromptStyle | Split = DEFAULT_SPLIT) -> str:
    s = style_of(style)
    how = _OWN_HOW if s.own_delimiter else _HOW[s.split]
    return (
        f"Solve the math problem step by step. {how}, and end with the final answer in a box, "
        "as in the example."
    )


def example_solution(style: PromptStyle | Split = DEFAULT_SPLIT) -> str:
    s = style_of(style)
    steps = EXAMPLE_STEPS if s.split != "numbered" else [f"{i}. {t}" for i, t in enumerate(EXAMPLE_STEPS, 1)]
    return s.delimiter.join(steps)


class Template:
    """A model's prompts: through its tokenizer's chat template (or the style's own), else plain
    text. Called with a question, it gives the head the reply (its first step) continues."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase | None = None) -> None:
        self.tokenizer = tokenizer

    def __call__(self, question: str, style: PromptStyle | Split = DEFAULT_STYLE, /) -> str:
        s = style_of(style)
        if s.system_prompt:  # the system prompt and the question, as search-and-learn writes them
            system, turns = s.system_prompt, [{"role": "user", "content": question}]
        else:  # SPEX's instruction, and the worked example as an earlier exchange
            system = instruction(s)
            turns = [
                {"role": "user", "content": EXAMPLE_QUESTION},
                {"role": "assistant", "content": example_solution(s)},
                {"role": "user", "content": question},
            ]
        text = self.chat([{"role": "system", "content": system}, *turns], s)
        if text is not None:
            return text
        gap = "\n\n"
        if s.system_prompt:
            return f"{system}{gap}Question: {question}{gap}"
        example = f"Question: {EXAMPLE_QUESTION}{gap}{example_solution(s)}"
        return f"{system}{gap}{example}{gap}Question: {question}{gap}"

    def start_text(self) -> str:
        """The start token's text where the tokenizer puts one before a text it encodes (a
        Llama or Mistral tokenizer's `<s>`), else "": for a text written without a chat template
        and encoded without special tokens, as a model card's `tokenizer.encode(text)` has it."""
        tok = self.tokenizer
        if tok is None or tok.bos_token_id is None:
            return ""
        bos = tok.bos_token_id
        added = tok.encode("1")[:1] == [bos] != tok.encode("1", add_special_tokens=False)[:1]
        return str(tok.bos_token) if added else ""

    def has_chat(self, style: PromptStyle | Split = DEFAULT_STYLE) -> bool:
        return bool(
            style_of(style).chat_template or (self.tokenizer is not None and self.tokenizer.chat_template)
        )

    def chat(
        self,
        turns: list[dict[str, str]],
        style: PromptStyle | Split = DEFAULT_STYLE,
        generation_prompt: bool = True,
    ) -> str | None:
        """`turns` through the chat template (None without one). A template that refuses a
        system turn gets its text at the head of the first user turn instead."""
        s = style_of(style)
        if not self.has_chat(s):
            return None
        try:
            return self._render(turns, s, generation_prompt)
        except Exception:  # noqa: BLE001 - a template without a system turn raises its own error
            if not turns or turns[0]["role"] != "system" or len(turns) < 2:
                raise
            first = {"role": turns[1]["role"], "content": f"{turns[0]['content']}\n\n{turns[1]['content']}"}
            return self._render([first, *turns[2:]], s, generation_prompt)

    def _render(self, turns: list[dict[str, str]], s: PromptStyle, generation_prompt: bool) -> str:
        if self.tokenizer is None:  # a template of one's own with no tokenizer: no special tokens
            return render_chat(s.chat_template, turns, generation_prompt)
        if not s.chat_template:
            return str(
                self.tokenizer.apply_chat_template(
                    turns, add_generation_prompt=generation_prompt, tokenize=False
                )
            )
        from jinja2.exceptions import TemplateError

        try:  # one's own through the tokenizer: its special tokens known
            return str(
                self.tokenizer.apply_chat_template(
                    turns,
                    add_generation_prompt=generation_prompt,
                    tokenize=False,
                    chat_template=s.chat_template,
                )
            )
        except TemplateError as exc:  # a job's own template that fails: the job's fault, named
            raise ValueError(f"chat_template: {exc}") from None


plain_template = Template()  # no tokenizer: plain text, unless a style brings its own chat template


def chat_template(tokenizer: PreTrainedTokenizerBase) -> Template:
    """The prompts of `tokenizer`'s model: through its chat template if it has one (the
    instruction as the system turn, the example as an earlier exchange), else plain."""
    return Template(tokenizer)


def prompt_pieces(
    question: str,
    steps: Sequence[str],
    template: Template = plain_template,
    style: PromptStyle | Split = DEFAULT_STYLE,
) -> list[str]:
    """The prompt as pieces: the head, then every step with its delimiter."""
    s = style_of(style)
    return [template(question, s), *(step + s.delimiter for step in steps)]


def filler(n: int) -> list[str]:
    """`n` plain words of no meaning (`w0 w1 …`), for prompts sized to a token count."""
    return [f"w{i % 97}" for i in range(n)]


def fewest_words(
    words: list[str], piece: Callable[[list[str]], str], count: Callable[[str], int], tokens: int
) -> str:
    """The piece of the fewest of `words` (at least one) whose `count` reaches `tokens` (all
    of them if none does): a text sized to a token count, a token or two over as words go."""
    low, high = 1, len(words)
    while low < high:
        mid = (low + high) // 2
        if count(piece(words[:mid])) < tokens:
            low = mid + 1
        else:
            high = mid
    return piece(words[:low])


class SizedPrompt:
    """A synthetic prompt's text for a real engine, sized to the workload's token counts: the
    head (the template over the question, padded with filler words) and each step (its words,
    cut or padded) reach the tokens the simulator counts for them (`EngineRequest.prompt`), so
    both sides prefill and cache the same amounts. Each piece is the fewest words that reach
    its count (a token or two over, as words tokenize; a head whose template alone is longer
    keeps one word of the question). `count` is None where the engine cannot count tokens (a
    server without `--model`): the texts go as they are."""

    def __init__(
        self, template: Template, style: PromptStyle | Split, count: Callable[[str], int] | None
    ) -> None:
        self.template, self.style, self.count = template, style_of(style), count
        self._sized: dict[tuple[str, int, bool], str] = {}  # (text, tokens, head?) -> piece

    def pieces(self, question: str, steps: list[str], prompt: Sequence[tuple[str, int]]) -> tuple[str, ...]:
        if self.count is None:
            return tuple(prompt_pieces(question, steps, self.template, self.style))
        assert len(prompt) == 1 + len(steps), "a prompt is the question's segment, then each step's"
        out = [self._fit(question, prompt[0][1], head=True)]
        for step, (_, tokens) in zip(steps, prompt[1:], strict=True):
            out.append(self._fit(step, tokens, head=False))
        return tuple(out)

    def _fit(self, text: str, tokens: int, head: bool) -> str:
        key = (text, tokens, head)
        if key not in self._sized:
            assert self.count is not None
            if len(self._sized) > 100_000:  # a long-running service's: bounded
                self._sized.clear()
            gap = self.style.delimiter

            def piece(words: list[str]) -> str:
                return self.template(" ".join(words), self.style) if head else " ".join(words) + gap

            self._sized[key] = fewest_words([*text.split(), *filler(tokens)], piece, self.count, tokens)
        return self._sized[key]
