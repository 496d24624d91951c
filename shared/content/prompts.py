"""How a search's path becomes a model's prompt, and how a model's output becomes a step.

A prompt is built in pieces: the head (the instruction and the question, through the
tokenizer's chat template where it has one) and then each step on the path followed by the
step delimiter. A child's prompt is therefore its parent's prompt plus one piece, which is
what lets an engine's prefix cache reuse the parent's KV piece by piece. A model writes one
step per generation: it stops at the delimiter, at its end-of-sequence token, or at the step's
token limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["INSTRUCTION", "STEP_DELIMITER", "Template", "chat_template", "plain_template", "prompt_pieces"]

STEP_DELIMITER = "\n\n"  # between steps; a generation stops when it writes one
INSTRUCTION = (
    "Solve the following math problem step by step. Separate the steps with a blank line, "
    "and write the final answer as \\boxed{answer}.\n\n"
)

Template = Callable[[str], str]  # user message -> the text the assistant's reply continues


def plain_template(message: str) -> str:
    """For a tokenizer without a chat template."""
    return f"{message}{STEP_DELIMITER}"


def chat_template(tokenizer: Any) -> Template:
    """The prompt head through `tokenizer`'s chat template if it has one, else plain."""
    if not getattr(tokenizer, "chat_template", None):
        return plain_template

    def head(message: str) -> str:
        messages = [{"role": "user", "content": message}]
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))

    return head


def prompt_pieces(question: str, steps: Sequence[str], template: Template = plain_template) -> list[str]:
    """The prompt as pieces: the head, then every step with its delimiter."""
    return [template(INSTRUCTION + question), *(step + STEP_DELIMITER for step in steps)]
