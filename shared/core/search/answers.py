"""Answer extraction and final-answer selection: majority, weighted majority, best-of-n."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, get_args

from spex.shared.core.tree import Node

__all__ = [
    "SELECTIONS",
    "AnswerSelection",
    "extract_answer",
    "last_boxed",
    "normalize_answer",
    "select_answer",
]

AnswerSelection = Literal["majority", "weighted", "best"]
SELECTIONS: tuple[AnswerSelection, ...] = get_args(AnswerSelection)

# REBASE extracts with `The answer is:(.+) ки`; ETS also accepts "The final answer is".
_ANSWER = re.compile(r"(?:final answer is|The answer is)\s*:?\s*(.+?)\s*(?:ки|$)", re.S)


def extract_answer(text: str) -> str | None:
    """The final answer a step gives: the last `\\boxed{...}` (braces nested to any depth), else
    what follows "The answer is"; None if the step gives none."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    m = _ANSWER.search(text)
    if m is None:
        return None
    return m.group(1).strip().rstrip(".")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` in `text`, or None (also when it is unclosed)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                content = text[i + 1 : j].strip()
                return content or None
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
