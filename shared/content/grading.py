"""Grading an extracted answer against a dataset's reference with math-verify, the grader that
test-time-search frameworks use: `\\frac12` = `0.5`, `\\dfrac` = `\\frac`, intervals, sets,
tuples, degrees, units and thousands separators compare by meaning, not by spelling."""

from __future__ import annotations

import logging
import threading

from math_verify import parse, verify

from spex.shared.core.search.answers import normalize_answer

__all__ = ["grade"]

# math-verify bounds its work with SIGALRM, which only the main thread may use; elsewhere it
# runs unbounded (and says so on every call, which is silenced here).
logging.getLogger("math_verify").setLevel(logging.ERROR)
_TIMEOUT_S = 5


def grade(answer: str | None, reference: str) -> bool:
    """Does `answer` (the text inside `\\boxed{}`) mean the same as `reference`?"""
    if answer is None or not answer.strip():
        return False
    if normalize_answer(answer) == normalize_answer(reference):
        return True
    timeout = _TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    gold = parse(f"${reference}$", parsing_timeout=timeout)
    pred = parse(f"${answer}$", parsing_timeout=timeout)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=timeout))
