"""Answer extraction and final-answer selection: majority, weighted majority, best-of-n."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, get_args

from spex.shared.core.tree import Node

__all__ = [
    "SELECTIONS",
    "AnswerSelection",
    "PLACEHOLDERS",
    "extract_answer",
    "is_placeholder",
    "last_boxed",
    "normalize_answer",
    "select_answer",
]

AnswerSelection = Literal["majority", "weighted", "best"]
SELECTIONS: tuple[AnswerSelection, ...] = get_args(AnswerSelection)

# REBASE extracts with `The answer is:(.+) ки`; ETS also accepts "The final answer is". The
# answer ends with its sentence: at a period followed by a space or the end, a line break, or
# REBASE's step mark — "The answer is 25. Now you have two" gives 25, "is 3.5." gives 3.5.
_ANSWER = re.compile(r"(?:final answer is|[Tt]he answer is)\s*:?\s*(.+?)(?=\s*(?:ки|\.\s|\.$|\n|$))")
# "7 is the answer." — how SmolLM2 ends a solution — read only for a number.
_NUMBER_IS_ANSWER = re.compile(r"(-?\d[\d,]*(?:\.\d+)?)\s+is the (?:final )?answer\b")
# What a model copies from an instruction instead of answering: never an answer.
PLACEHOLDERS = frozenset({"answer", "final answer", "your answer", "the answer", "...", "…", "?"})


def extract_answer(text: str) -> str | None:
    """The final answer a step gives: the last `\\boxed{...}` that holds one (braces nested to
    any depth; an empty box or a placeholder such as `\\boxed{answer}` does not), else what
    follows "The answer is" up to the end of its sentence, else a number that "is the
    answer"; None if the step gives none."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    m = _ANSWER.search(text)
    if m is None:
        numbers = _NUMBER_IS_ANSWER.findall(text)
        return numbers[-1] if numbers else None
    answer = m.group(1).strip().rstrip(".").strip()
    return None if not answer or is_placeholder(answer) else answer


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` in `text` that is an answer (not empty, not a
    placeholder), or None (also when it is unclosed)."""
    end = len(text)
    while (start := text.rfind("\\boxed{", 0, end)) >= 0:
        content = _box_content(text, start + len("\\boxed"))
        if content and not is_placeholder(content):
            return content
        end = start
    return None


def is_placeholder(answer: str) -> bool:
    """`answer` is a placeholder (`answer`, `\\text{your answer}`, `...`), not a value."""
    plain = re.sub(r"\\text\{([^{}]*)\}", r"\1", answer).strip().strip("$").strip().lower()
    return plain in PLACEHOLDERS


def _box_content(text: str, i: int) -> str | None:
    """The stripped content of the brace group opening at `text[i]`; None if it is unclosed."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None


def normalize_answer(answer: str) -> str:
    """Equivalence key: whitespace, `\\left`/`\\right`, `\\!` and `$` do not matter."""
    s = answer.replace("\\left", "").replace("\\right", "").replace("\\!", "").replace("$", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    return re.sub(r"\s+", "", s)


def select_answer(solutions: Sequence[Node], method: AnswerSelection) -> str | None:
    """Pick the final answer among solution nodes (each with `answer` and last-step `reward`).

    majority: most votes; weighted: largest summed reward; best: the single highest reward.
    Ties go to the larger summed reward, then to the answer first found."""
    if method not in SELECTIONS:
        raise ValueError(f"answer selection must be one of {SELECTIONS}, not {method!r}")
    votes: dict[str, list[float]] = {}
    for node in solutions:
        if node.answer is None:
            continue
        votes.setdefault(normalize_answer(node.answer), []).append(node.reward or 0.0)
    if not votes:
        return None
    order = list(votes)

    def key(ans: str) -> tuple[float, float, int]:
        w = votes[ans]
        primary = {"majority": float(len(w)), "weighted": sum(w), "best": max(w)}[method]
        return (primary, sum(w), -order.index(ans))

    return max(order, key=key)
