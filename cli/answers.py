"""How the client's commands show an answer: its text and grade, its solution's steps, what
served it, and whether speculation kept its promise against a baseline twin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from spex.shared.runtime.views import demonstration, served_reward

if TYPE_CHECKING:
    from spex.proto import AnswerResult

__all__ = ["print_answer", "twin_verdict"]


def twin_verdict(answer: AnswerResult, twin: AnswerResult | None) -> str:
    """Whether speculation kept its promise: the same tree as its baseline twin's."""
    if twin is None:
        return "no answer yet"
    if twin.error or twin.cancelled:
        return twin.error or "cancelled"
    same = twin.tree_digest == answer.tree_digest
    verdict = "the same tree: lossless" if same else "a DIFFERENT tree"
    return f"{verdict} (digest {twin.tree_digest[:12]}, answer {twin.answer})"


def print_answer(console: Console, answer: AnswerResult) -> None:
    """The query's answer, graded if it had a reference, then the steps of its solution."""
    if answer.error or answer.cancelled:
        console.print(f"{answer.query_id}: {answer.error or 'cancelled'}", markup=False)
        return
    grade = {True: " (correct)", False: " (wrong)", None: ""}[answer.correct]
    stopped = f" (stopped early, {answer.nodes} nodes)" if answer.early_stopped else ""
    console.print(f"{answer.query_id}: {answer.answer}{grade}{stopped}", markup=False)
    for i, step in enumerate(answer.solution, 1):
        console.print(f"  step {i}: {step}", markup=False, highlight=False)
    served = answer.served_by
    if served is not None:
        model = f" ({served.model})" if served.model else ""
        console.print(
            f"  answered by: {served.engine}{model}, {served.content} content, "
            f"reward {served_reward(served)}",
            markup=False,
        )
        if demonstration(served):
            console.print(f"  note: {demonstration(served)}", markup=False)
