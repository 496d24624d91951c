"""Grading an extracted answer against a dataset's reference with math-verify, the grader that
test-time-search frameworks use: `\\frac12` = `0.5`, `\\dfrac` = `\\frac`, intervals, sets,
tuples, degrees, units and thousands separators compare by meaning, not by spelling."""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from typing import Any

from math_verify import parse, verify

from spex.shared.core.search.answers import normalize_answer

__all__ = ["equivalent", "grade"]

# math-verify bounds its work with SIGALRM, which only the main thread may use; elsewhere it
# runs unbounded (and says so on every call, which is silenced here).
logging.getLogger("math_verify").setLevel(logging.ERROR)
_TIMEOUT_S = 5


def _timeout() -> int | None:
    return _TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=16_384)
def _parsed(answer: str) -> Any:
    return parse(f"${answer}$", parsing_timeout=_timeout())


@lru_cache(maxsize=65_536)
def _equivalent(a: str, b: str) -> bool:
    pa, pb = _parsed(a), _parsed(b)
    return bool(pa and pb and verify(pa, pb, timeout_seconds=_timeout()))


def equivalent(a: str, b: str) -> bool:
    """Do two answers mean the same (math-verify; `0.5` and `\\frac12` do)? For votes: each
    pair is compared once (in a fixed order, so either order finds it) and each answer parsed
    once (both cached)."""
    a, b = normalize_answer(a), normalize_answer(b)
    if a == b:
        return True
    return _equivalent(*sorted((a, b)))


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
