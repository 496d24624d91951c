"""How a search's path becomes a model's prompt, and how a model's output becomes a step.

A prompt is built in pieces: the head (the instruction, a worked example and the question,
through the tokenizer's chat template where it has one) and then each step on the path followed by the
step delimiter. A child's prompt is therefore its parent's prompt plus one piece, which is
what lets an engine's prefix cache reuse the parent's KV piece by piece. A model writes one
step per generation: it stops at the delimiter, at its end-of-sequence token, or at the step's
token limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "EXAMPLE_QUESTION",
    "EXAMPLE_SOLUTION",
    "EXAMPLE_STEPS",
    "INSTRUCTION",
    "STEP_DELIMITER",
    "Template",
    "chat_template",
    "plain_template",
    "prompt_pieces",
]

STEP_DELIMITER = "\n\n"  # between steps; a generation stops when it writes one
INSTRUCTION = (
    "Solve the math problem step by step. Write one short step per paragraph, leave a blank "
    "line between steps, and end with the final answer in a box, as in the example."
)
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
EXAMPLE_SOLUTION = STEP_DELIMITER.join(EXAMPLE_STEPS)

Template = Callable[[str], str]  # question -> the text the reply (its first step) continues


def plain_template(question: str) -> str:
    """For a tokenizer without a chat template: the instruction, the example, the question."""
    return (
        f"{INSTRUCTION}{STEP_DELIMITER}Question: {EXAMPLE_QUESTION}{STEP_DELIMITER}{EXAMPLE_SOLUTION}"
        f"{STEP_DELIMITER}Question: {question}{STEP_DELIMITER}"
    )


def chat_template(tokenizer: Any) -> Template:
    """The prompt head through `tokenizer`'s chat template if it has one (the instruction as
    the system turn, the example as an earlier exchange), else plain."""
    if not getattr(tokenizer, "chat_template", None):
        return plain_template

    def head(question: str) -> str:
        example = [
            {"role": "user", "content": EXAMPLE_QUESTION},
            {"role": "assistant", "content": EXAMPLE_SOLUTION},
            {"role": "user", "content": question},
        ]
        try:
            turns = [{"role": "system", "content": INSTRUCTION}, *example]
            text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        except Exception:  # noqa: BLE001 - a template without a system turn raises its own error
            first = {"role": "user", "content": f"{INSTRUCTION}{STEP_DELIMITER}{EXAMPLE_QUESTION}"}
            turns = [first, *example[1:]]
            text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        return str(text)

    return head


def prompt_pieces(question: str, steps: Sequence[str], template: Template = plain_template) -> list[str]:
    """The prompt as pieces: the head, then every step with its delimiter."""
    return [template(question), *(step + STEP_DELIMITER for step in steps)]
