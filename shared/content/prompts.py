"""How a search's path becomes a model's prompt, and how a model's output becomes a step.

A prompt is built in pieces: the head (the instruction, a worked example and the question,
through the tokenizer's chat template where it has one) and then each step on the path followed by the
step delimiter. A child's prompt is therefore its parent's prompt plus one piece, which is
what lets an engine's prefix cache reuse the parent's KV piece by piece. A model writes one
step per generation: it stops at one of the split's stop strings, at its end-of-sequence
token, or at the step's token limit (`max_new_tokens`).

Where a step ends is the split (`Split`), the same for the prompt's example, its instruction,
the delimiter between the path's steps and the generation's stop strings:
- `blank-line`: a step is a paragraph; steps are separated by an empty line.
- `newline`: a step is one line.
- `numbered`: a step is a numbered line ("2. ...") with any unnumbered lines after it; the
  next step starts at the next line that begins with a number and a full stop.
A stop string met before a step's `min_tokens` does not end it (the step goes on): a model
that writes a heading or a one-word line does not make a step of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from spex.proto.messages import SPLITS, Split

__all__ = [
    "DEFAULT_SPLIT",
    "DEFAULT_TEMPERATURE",
    "EXAMPLE_QUESTION",
    "EXAMPLE_STEPS",
    "SPLITS",
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
]

# The default split and real content's sampling temperature: the best measured for SmolLM2-135M
# on the easy set (docs/journal/real-model.md).
DEFAULT_SPLIT: Split = "newline"
DEFAULT_TEMPERATURE = 0.3
_DELIMITERS: dict[Split, str] = {"blank-line": "\n\n", "newline": "\n", "numbered": "\n"}
_NUMBERED = 30  # numbered steps the stop strings know ("\n2." to "\n30.")
_HOW: dict[Split, str] = {
    "blank-line": "Write one short step per paragraph and leave a blank line between steps",
    "newline": "Write one short step per line",
    "numbered": "Number the steps and write each on its own line",
}
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


def delimiter(split: Split = DEFAULT_SPLIT) -> str:
    """What follows each step of the path in a prompt."""
    return _DELIMITERS[split]


def stop_strings(split: Split = DEFAULT_SPLIT) -> tuple[str, ...]:
    """The strings that end a generated step."""
    if split == "numbered":
        return tuple(f"\n{n}." for n in range(2, _NUMBERED + 1))
    return (_DELIMITERS[split],)


def instruction(split: Split = DEFAULT_SPLIT) -> str:
    return (
        f"Solve the math problem step by step. {_HOW[split]}, and end with the final answer in a box, "
        "as in the example."
    )


def example_solution(split: Split = DEFAULT_SPLIT) -> str:
    steps = EXAMPLE_STEPS if split != "numbered" else [f"{i}. {s}" for i, s in enumerate(EXAMPLE_STEPS, 1)]
    return delimiter(split).join(steps)


class Template(Protocol):
    """question, split -> the text the reply (its first step) continues."""

    def __call__(self, question: str, split: Split = ..., /) -> str: ...


def plain_template(question: str, split: Split = DEFAULT_SPLIT, /) -> str:
    """For a tokenizer without a chat template: the instruction, the example, the question."""
    gap = "\n\n"
    return (
        f"{instruction(split)}{gap}Question: {EXAMPLE_QUESTION}{gap}{example_solution(split)}"
        f"{gap}Question: {question}{gap}"
    )


def chat_template(tokenizer: Any) -> Template:
    """The prompt head through `tokenizer`'s chat template if it has one (the instruction as
    the system turn, the example as an earlier exchange), else plain."""
    if not getattr(tokenizer, "chat_template", None):
        return plain_template

    def head(question: str, split: Split = DEFAULT_SPLIT, /) -> str:
        example = [
            {"role": "user", "content": EXAMPLE_QUESTION},
            {"role": "assistant", "content": example_solution(split)},
            {"role": "user", "content": question},
        ]
        try:
            turns = [{"role": "system", "content": instruction(split)}, *example]
            text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        except Exception:  # noqa: BLE001 - a template without a system turn raises its own error
            first = {"role": "user", "content": f"{instruction(split)}\n\n{EXAMPLE_QUESTION}"}
            turns = [first, *example[1:]]
            text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        return str(text)

    return head


def prompt_pieces(
    question: str, steps: Sequence[str], template: Template = plain_template, split: Split = DEFAULT_SPLIT
) -> list[str]:
    """The prompt as pieces: the head, then every step with its delimiter."""
    gap = delimiter(split)
    return [template(question, split), *(step + gap for step in steps)]


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

    def __init__(self, template: Template, split: Split, count: Callable[[str], int] | None) -> None:
        self.template, self.split, self.count = template, split, count
        self._sized: dict[tuple[str, int, bool], str] = {}  # (text, tokens, head?) -> piece

    def pieces(self, question: str, steps: list[str], prompt: Sequence[tuple[str, int]]) -> tuple[str, ...]:
        if self.count is None:
            return tuple(prompt_pieces(question, steps, self.template, self.split))
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
            gap = delimiter(self.split)

            def piece(words: list[str]) -> str:
                return self.template(" ".join(words), self.split) if head else " ".join(words) + gap

            self._sized[key] = fewest_words([*text.split(), *filler(tokens)], piece, self.count, tokens)
        return self._sized[key]
