"""Answer extraction and final-answer selection: majority, weighted majority, best-of-n.

Votes go to answers by meaning where an equivalence is given (`Equivalence`: real content
passes math-verify's, `spex.shared.content.grading.equivalent`, so `0.5` and `\\frac12` vote
together), else by spelling up to `normalize_answer`. An answer joins the first earlier group
whose answer it is equivalent to; the group is named by its first spelling."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from spex.proto.messages import ANSWER_SELECTIONS, AnswerSelection
from spex.shared.core.tree import Node

__all__ = [
    "SELECTIONS",
    "AnswerSelection",
    "Equivalence",
    "PLACEHOLDERS",
    "Votes",
    "extract_answer",
    "is_placeholder",
    "last_boxed",
    "normalize_answer",
    "select_answer",
]

SELECTIONS = ANSWER_SELECTIONS  # majority, weighted, best (the wire's value set)
Equivalence = Callable[[str, str], bool]  # do two (normalized) answers mean the same?

# REBASE extracts with `The answer is:(.+) ки`; ETS also accepts "The final answer is". The
# answer ends with its sentence: at a period followed by a space or the end, a line break, or
# REBASE's step mark — "The answer is 25. Now you have two" gives 25, "is 3.5." gives 3.5.
_ANSWER = re.compile(r"(?:final answer is|[Tt]he answer is)\s*:?\s*(.+?)(?=\s*(?:ки|\.\s|\.$|\n|$))")
_NUMBER = r"(-?\d[\d,]*(?:\.\d+)?)"
# "7 is the answer." — how SmolLM2 ends a solution — read only for a number.
_NUMBER_IS_ANSWER = re.compile(_NUMBER + r"\s+is the (?:final )?answer\b")
# "The answer is 2 * 7 = 14 cards": the result after the last "=", and a number without its unit.
_NUMBER_AND_WORDS = re.compile(_NUMBER + r"(?:\s+[A-Za-z]+)+")
# What a model copies from an instruction instead of answering: never an answer.
PLACEHOLDERS = frozenset({"answer", "final answer", "your answer", "the answer", "...", "…", "?"})


def extract_answer(text: str) -> str | None:
    """The final answer a step gives: the last `\\boxed{...}` that holds one (braces nested to
    any depth; an empty box or a placeholder such as `\\boxed{answer}` does not), else what
    follows "The answer is" up to the end of its sentence (the result after its last "=", a
    number without the words after it), else a number that "is the answer"; None if the step
    gives none."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    m = _ANSWER.search(text)
    if m is None:
        numbers = _NUMBER_IS_ANSWER.findall(text)
        return numbers[-1] if numbers else None
    answer = m.group(1).rpartition("=")[2].strip().rstrip(".").strip()
    unit = _NUMBER_AND_WORDS.fullmatch(answer)
    if unit is not None:
        answer = unit.group(1)
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


class Votes:
    """Weights cast for answers, grouped by meaning (`same`) or by normalized spelling."""

    def __init__(self, same: Equivalence | None = None) -> None:
        self.same = same
        self.groups: dict[str, list[float]] = {}  # group key (normalized) -> weights, first found first
        self.spelling: dict[str, str] = {}  # group key -> the group's first answer as written
        self._key_of: dict[str, str] = {}  # normalized answer -> its group's key

    def add(self, answer: str, weight: float) -> None:
        key = self.key(answer)
        self.groups.setdefault(key, []).append(weight)
        self.spelling.setdefault(key, answer)

    def key(self, answer: str) -> str:
        norm = normalize_answer(answer)
        key = self._key_of.get(norm)
        if key is None:
            same = self.same
            key = next((k for k in self.groups if same is not None and same(k, norm)), norm)
            self._key_of[norm] = key
        return key


def select_answer(
    solutions: Sequence[Node],
    method: AnswerSelection,
    same: Equivalence | None = None,
    weight: Callable[[Node], float] | None = None,
) -> str | None:
    """Pick the final answer among solution nodes (each with `answer`), each weighing
    `weight(node)` (default: its last-step `reward`); a node listed twice votes twice.

    majority: most votes; weighted: largest summed weight; best: the single highest weight.
    Ties go to the larger summed weight, then to the answer first found."""
    if method not in SELECTIONS:
        raise ValueError(f"answer selection must be one of {SELECTIONS}, not {method!r}")
    votes = Votes(same)
    for node in solutions:
        if node.answer is not None:
            votes.add(node.answer, weight(node) if weight is not None else node.reward or 0.0)
    if not votes.groups:
        return None
    order = list(votes.groups)

    def key(ans: str) -> tuple[float, float, int]:
        w = votes.groups[ans]
        primary = {"majority": float(len(w)), "weighted": sum(w), "best": max(w)}[method]
        return (primary, sum(w), -order.index(ans))

    return max(order, key=key)
