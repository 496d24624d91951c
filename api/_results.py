"""What an offline evaluation returns: a `QuestionResult` per question, collected in an
`Evaluation` (one run) or a `Comparison` (the baseline and SPEX side by side), each of which
turns into records or a pandas frame and writes its results file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from spex.bench.results import write_json

if TYPE_CHECKING:
    import pandas

__all__ = ["Comparison", "Evaluation", "QuestionResult"]


@dataclass(frozen=True)
class QuestionResult:
    """One question's search: its answer, grade, solution, tree and costs.

    Attributes:
        query_id: The question's id (`q00000`, ...): with the seed, what its search derives from.
        question: The question's text.
        reference: What the answer was graded against (`None`: ungraded). On the `sim` engine,
            the synthetic workload's answer for this id.
        answer: The answer the search chose (`None`: it found none).
        correct: The answer graded against the reference with math-verify (`0.5` and
            `\\frac12` are equal); `None` for an ungraded question.
        solution: The steps of the solution the answer came from (with no answer, of the
            deepest step reached).
        tree_digest: A digest of the searched tree (structure, each step's text, token count
            and answer; on synthetic content its rewards too) and the answer: the same search
            gives the same digest, in `spex bench` and in the pipeline.
        nodes: Steps the search generated (its tree less the root).
        tokens: Tokens of those steps.
        latency_s: From the question's start to its answer, on the engine's clock: simulated
            seconds on `sim`, wall seconds on a real engine.
        early_stopped: Adaptive early termination (T3) ended the search.
        speculative_issued: Speculative generations issued for it (0 in a baseline run).
        speculative_adopted: Of those, the ones its search used.
    """

    query_id: str
    question: str
    reference: str | None
    answer: str | None
    correct: bool | None
    solution: tuple[str, ...]
    tree_digest: str
    nodes: int
    tokens: int
    latency_s: float
    early_stopped: bool
    speculative_issued: int
    speculative_adopted: int

    def to_record(self) -> dict[str, object]:
        """This result as a plain dict (the solution as a list): a row of `to_records`."""
        out = asdict(self)
        out["solution"] = list(self.solution)
        return out


@dataclass(frozen=True)
class Evaluation(Sequence[QuestionResult]):
    """One run over a dataset: a `QuestionResult` per question, in the dataset's order, and the
    run's figures. Iterate it, index it, or turn it into records or a frame.

    Attributes:
        mode: `"baseline"` (the plain search) or `"spex"` (with speculation).
        algorithm: The search.
        target: Its width (REBASE, ETS) or rollouts (MCTS).
        seed: The seed every search derives from.
        engine: The generator's kind (`sim`, `hf`, `vllm`, `sglang`).
        reward: `"prm"` or `"logprob"`.
        content: `"synthetic"` (the `sim` engine: the workload's trees) or `"real"` (the
            model's text).
        results: The questions' results.
        accuracy: Correct answers over graded questions (`None`: none was graded).
        throughput_qpm: Questions answered per minute, on the engine's clock.
        makespan_s: The run's length on the engine's clock.
        wall_s: The run's wall time.
        tokens_generated: Tokens of the final trees.
        tokens_all: Every token generated, cancelled speculation included.
        hit_rate: Speculative generations the searches used, over those issued (`None`: none).
        compute_amplification: `tokens_all` over `tokens_generated`.
        summary: Every figure of the run as `spex bench` writes it to its results file (the
            docs' "results file" page lists them).
    """

    mode: str
    algorithm: str
    target: int
    seed: int
    engine: str
    reward: str
    content: str
    results: tuple[QuestionResult, ...]
    accuracy: float | None
    throughput_qpm: float
    makespan_s: float
    wall_s: float
    tokens_generated: int
    tokens_all: int
    hit_rate: float | None
    compute_amplification: float
    summary: dict[str, Any] = field(repr=False)

    @overload
    def __getitem__(self, index: int) -> QuestionResult: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[QuestionResult]: ...

    def __getitem__(self, index: int | slice) -> QuestionResult | Sequence[QuestionResult]:
        return self.results[index]

    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[QuestionResult]:
        return iter(self.results)

    def to_records(self) -> list[dict[str, object]]:
        """A dict per question (`QuestionResult`'s fields), in order."""
        return [r.to_record() for r in self.results]

    def to_pandas(self) -> pandas.DataFrame:
        """A frame of `to_records`, a row per question, indexed by `query_id`. Needs pandas
        (`pip install pandas`)."""
        return _frame(self.to_records())

    def to_json(self) -> dict[str, object]:
        """The run's figures (`summary`) and its questions' records under `"questions"`."""
        return {**self.summary, "questions": self.to_records()}

    def write_json(self, path: str | Path) -> None:
        """Write `to_json` to `path` (its folder made if need be)."""
        write_json(self.to_json(), path)


# What a comparison's records carry of each run, suffixed `_baseline` and `_spex`.
PER_RUN = ("answer", "correct", "tree_digest", "nodes", "tokens", "latency_s", "speculative_issued",
           "speculative_adopted")  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """The baseline and SPEX over the same dataset, engine and seed, run back to back, and
    whether speculation kept its promise.

    Attributes:
        baseline: The plain search's run.
        spex: The run with speculation.
        lossless: Identical trees and answers, rewards within the stated tolerance (1e-4: a
            real model's rewards differ in their last bits between batch shapes).
        trees_identical: Every question's tree the same (structure, texts, tokens, answers).
        same_answers: Every question's answer the same.
        max_reward_difference: The largest difference of one step's reward between the runs
            (`None`: no step scored in both).
        speedup: SPEX's throughput over the baseline's, on the engine's clock.
        summary: Every figure of the comparison as `spex bench --mode compare` writes it.
    """

    baseline: Evaluation
    spex: Evaluation
    lossless: bool
    trees_identical: bool
    same_answers: bool
    max_reward_difference: float | None
    speedup: float
    summary: dict[str, Any] = field(repr=False)

    def to_records(self) -> list[dict[str, object]]:
        """A dict per question: its id, text and reference, then each run's answer, grade,
        digest, size, latency and speculation suffixed `_baseline` and `_spex`, and
        `same_tree` (the two digests equal)."""
        out = []
        for base, spex in zip(self.baseline.results, self.spex.results, strict=True):
            row: dict[str, object] = {
                "query_id": base.query_id,
                "question": base.question,
                "reference": base.reference,
            }
            for name in PER_RUN:
                row[f"{name}_baseline"] = getattr(base, name)
                row[f"{name}_spex"] = getattr(spex, name)
            row["same_tree"] = base.tree_digest == spex.tree_digest
            out.append(row)
        return out

    def to_pandas(self) -> pandas.DataFrame:
        """A frame of `to_records`, a row per question, indexed by `query_id`. Needs pandas."""
        return _frame(self.to_records())

    def to_json(self) -> dict[str, object]:
        """The comparison's figures (`summary`, each run's under `baseline` and `spex`) with
        each run's question records under its `"questions"`."""
        out = dict(self.summary)
        out["baseline"] = self.baseline.to_json()
        out["spex"] = self.spex.to_json()
        return out

    def write_json(self, path: str | Path) -> None:
        """Write `to_json` to `path` (its folder made if need be)."""
        write_json(self.to_json(), path)


def _frame(records: list[dict[str, object]]) -> pandas.DataFrame:
    try:
        import pandas
    except ImportError:
        raise ImportError("to_pandas needs pandas: pip install pandas (to_records needs nothing)") from None
    return pandas.DataFrame.from_records(records, index="query_id")
