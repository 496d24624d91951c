"""The GPU check: the in-process engine on a GPU, measured and set beside the simulator.

    python -m spex.bench.gpu_check --out DIR            # on a machine with an NVIDIA GPU
    python -m spex.bench.gpu_check --out DIR --dry-run  # the same stages on this CPU, tiny shapes

`make gpu-check` runs it on a GPU machine with no network, from the wheels `make gpu-wheels`
fetched beside the working tree. The stages, each guarded (one that fails leaves the others'
results) and each written to DIR as it ends (a run cut short returns what it had):

1. `forward`: the engine's forward pass against transformers' own on small models of each
   architecture, in float32 and bfloat16 on the device (`forward_check`): the Triton kernels
   and the CUDA graphs met before anything is timed. Graphs that fail or disagree with the
   eager pass are turned off for the rest of the check (and it says so).
2. `models`: the catalog's Llemma-7B (Llama-2-7B's shape) and R1-Qwen3-8B (GQA) as configs;
   their random bf16 weights are built on the GPU as each is loaded.
3. `profile <shape>`: the decode step by batch × context on each (`hf_profile`): the
   measured profile the simulator, the TPOT governor and the budget then read. The 7B's
   first, then its cells; the other shape's last (no cell waits on it).
4. `bench <cell>`: baseline against SPEX on the 7B shape, synthetic content (the workload's
   token counts), interleaved pairs, the governor holding primary TPOT to +5% by the measured
   profile: rStar-10 and REBASE-16 at B=1 and B=4.
5. `predict <cell>`: the same cells in the simulator, stepping as the measured profile says.

At most eight files: summary.json (the environment, each stage, the aims and the table),
profile-<shape>.json, cells.json (every real and simulated record), gpu-check.png and
gpu-check.log. A stage that would run past the time budget is skipped and said so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from spex.bench.gpu_report import aims, cell_rows, plot, print_table
from spex.shared.hf.shapes import SHAPES

__all__ = ["DRY_RUN", "GPU", "Plan", "main", "run_check"]

CELLS = (("rstar", 10, 1), ("rebase", 16, 1), ("rstar", 10, 4), ("rebase", 16, 4))
BENCH_SHAPE = "Llemma-7B"  # the paper's Llemma setting: the cells run on its shape
FORWARD_TOLERANCE = 1e-3  # float32 logits against transformers' (the CPU's agree within 1e-4)
BF16_TOLERANCE = 0.1  # bfloat16's: roundings in another order (the CPU's agree within 0.1)
GRAPH_TOLERANCE = 1e-4  # a replayed decode pass against the same pass run eagerly
FIRST_CELL_S = 60.0  # the first cell (rStar-10 B=1): a warm-up and 3 pairs at the simulator's H200 makespans


@dataclass(frozen=True)
class Plan:
    device: str
    tiny: bool  # the shapes at a CPU's size (`Shape.tiny`)
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    new_tokens: int
    profile_repeats: int
    pairs: int
    step_token_cap: int | None  # a shorter step than the workload's (dry run: less to decode)
    budget_s: float
    cuda_graphs: bool = True


GPU = Plan("cuda", False, (1, 2, 4, 8, 16, 32, 64), (512, 1024, 2048, 4096), 32, 1, 3, None, 480.0)
DRY_RUN = Plan("cpu", True, (1, 2, 4), (32, 64), 4, 1, 1, 8, 600.0, cuda_graphs=False)
DRY_NOTE = (
    "A DRY RUN: the check's stages on this CPU with tiny shapes, one pair a cell. Its figures "
    "test the check; they say nothing about a GPU."
)


class Check:
    """The stages' bookkeeping: progress lines, the summary rewritten after each stage."""

    def __init__(self, out: Path, plan: Plan) -> None:
        self.out, self.plan = out, plan
        self.start = time.monotonic()
        self.summary: dict[str, Any] = {"plan": asdict(plan), "stages": {}, "environment": environment(plan)}
        self.summary["note"] = DRY_NOTE if plan.tiny else ""
        self.cells: dict[str, Any] = {}
        self.durations: list[float] = []

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f} s] {text}", flush=True)

    def stage(self, name: str, fn: Callable[[], Any], estimate_s: float = 0.0) -> Any:
        left = self.plan.budget_s - (time.monotonic() - self.start)
        if estimate_s > left:
            self.say(f"{name}: skipped ({estimate_s:.0f} s expected, {left:.0f} s left in the budget)")
            self.summary["stages"][name] = {"status": "skipped: over the time budget", "seconds": 0.0}
            self.write()
            return None
        self.say(f"{name} ...")
        began = time.monotonic()
        try:
            result, status = fn(), "ok"
        except Exception as exc:  # noqa: BLE001 - a failed stage is reported; the others go on
            traceback.print_exc(file=sys.stdout)
            result, status = None, f"failed: {type(exc).__name__}: {exc}"
        _free_memory()  # what the stage held (a profile's KV pool) before the next one allocates
        seconds = time.monotonic() - began
        self.summary["stages"][name] = {"status": status, "seconds": round(seconds, 1)}
        self.say(f"{name}: {status} in {seconds:.1f} s")
        self.write()
        return result

    def write(self) -> None:
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str) + "\n")
        (self.out / "cells.json").write_text(json.dumps(self.cells, indent=2, default=str) + "\n")


def _free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def environment(plan: Plan) -> dict[str, Any]:
    import platform

    import torch
    import transformers

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    env["transformers"] = transformers.__version__
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if plan.device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 1e9, 1)
    return env


def catalog_gpu(name: str) -> str:
    """The catalog's GPU for a device name (`roofline.hardware.GPUS`); H200 when none matches
    (and for a CPU dry run)."""
    for key, gpu in (("H200", "H200"), ("H100", "H100"), ("A6000", "A6000"), ("A40", "A40")):
        if key in name:
            return gpu
    if "A100" in name:
        return "A100-80GB" if "80" in name else "A100-40GB"
    return "H200"


def forward(check: Check) -> dict[str, Any]:
    """The forward pass against transformers on the device, in float32 and bfloat16; CUDA
    graphs off for the rest of the check if they fail or disagree with the eager pass."""
    import torch

    from spex.bench.forward_check import check as forward_check

    rows: dict[str, Any] = {}
    for dtype, tolerance in ((torch.float32, FORWARD_TOLERANCE), (torch.bfloat16, BF16_TOLERANCE)):
        name = str(dtype).removeprefix("torch.")
        try:
            got = forward_check(check.plan.device, dtype, check.plan.cuda_graphs)
        except Exception as exc:
            if not check.plan.cuda_graphs:
                raise
            check.say(f"  {name} with CUDA graphs failed ({type(exc).__name__}: {exc}): trying without them")
            _graphs_off(check)
            got = forward_check(check.plan.device, dtype, cuda_graphs=False)
        for kind, row in got.items():
            check.say(f"  {kind} {name}: {row}")
            rows[f"{kind} {name}"] = row | {"tolerance": tolerance}
        if any(
            row.get("graphs_vs_eager", 0.0) > GRAPH_TOLERANCE * tolerance / FORWARD_TOLERANCE
            for row in got.values()
        ):
            check.say("  CUDA graphs disagree with the eager pass: the rest of the check runs without them")
            _graphs_off(check)
    check.summary["forward"] = rows
    bad = [key for key, row in rows.items() if not row["vs_transformers"] <= row["tolerance"]]
    if bad:
        raise RuntimeError(f"the forward pass is off transformers' for {', '.join(bad)} (see summary.json)")
    return rows


def _graphs_off(check: Check) -> None:
    check.plan = replace(check.plan, cuda_graphs=False)
    check.summary["plan"]["cuda_graphs"] = False


def build_models(check: Check, models_dir: Path) -> dict[str, Path]:
    from spex.shared.hf.models import ModelSpec, init_model

    out = {}
    for name, shape in SHAPES.items():
        out[name] = init_model(ModelSpec(shape=shape.tiny() if check.plan.tiny else shape), models_dir / name)
    return out


def profile(check: Check, name: str, model: Path) -> Path:
    from spex.bench.engine_speed import write_report
    from spex.bench.hf_profile import profile_engine
    from spex.shared.hf.sweep import measure_hf

    plan = check.plan
    batches, contexts = list(plan.batches), list(plan.contexts)
    engine = profile_engine(
        model, batches, contexts, plan.new_tokens, plan.device, cuda_graphs=plan.cuda_graphs
    )
    cells, skipped = measure_hf(
        engine,
        batches,
        contexts,
        plan.new_tokens,
        plan.profile_repeats,
        on_cell=lambda c: check.say(
            f"  {name} batch {c.batch} × context {c.context}: {c.step_ms:.2f} ms a step"
        ),
    )
    dtype = str(engine.runner.dtype).removeprefix("torch.")
    shape = f"{name} (tiny)" if plan.tiny else name
    meta: dict[str, Any] = {
        "engine": f"{shape}@hf ({dtype}, {check.summary['environment'].get('gpu', plan.device)})"
    }
    meta |= {"new_tokens": plan.new_tokens, "repeats": plan.profile_repeats, "device": plan.device}
    meta |= {"dtype": dtype, "cuda_graphs": engine.runner.graphs is not None, "skipped": skipped}
    meta |= {"kv_capacity_tokens": engine.capacity_tokens, "graph_capture_s": engine.runner.startup_s}
    meta |= {"forward": engine.runner.path}
    engine.close()
    path = check.out / f"profile-{name}.json"
    write_report(cells, meta, path, plot=False)
    return path


def bench_cell(
    check: Check, cell: tuple[str, int, int], model: Path, profile_file: Path | None, sim: bool
) -> dict[str, Any]:
    """The cell, baseline against SPEX: on the engine (interleaved pairs), or in the simulator
    stepping as `profile_file` says (the catalog profile's timing where None)."""
    from spex.bench.pairs import compare_pairs
    from spex.bench.vtime import BenchConfig
    from spex.shared.sim.workload import WorkloadKnobs

    algorithm, target, batch = cell
    plan = check.plan
    knobs = WorkloadKnobs()
    if plan.step_token_cap is not None:
        knobs = replace(knobs, step_token_cap=plan.step_token_cap)
    gpu = catalog_gpu(str(check.summary["environment"].get("gpu", "")))
    cfg = BenchConfig(
        algorithm=algorithm,
        target=target,
        batch_size=batch,
        questions=batch,
        profile=f"{BENCH_SHAPE}@{gpu}",
        knobs=knobs,
        backend="sim" if sim else "hf",
        model=None if sim else str(model),
        content="synthetic",
        device=plan.device,
        cuda_graphs=plan.cuda_graphs,
        mode="spex",
        tpot_target=0.05,
        profile_file=None if profile_file is None else str(profile_file),
    )
    cfg.validate()
    return compare_pairs(cfg, 1 if sim else plan.pairs).to_json()


def run_check(plan: Plan, out: Path) -> dict[str, Any]:
    """The stages in order: the forward pass, the models, the 7B shape's profile and its cells
    (each measured, then predicted), the other shape's profile last (no cell waits on it)."""
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, plan)
    check.say(f"environment: {check.summary['environment']}")
    if check.summary["note"]:
        check.say(check.summary["note"])
    check.stage("forward", partial(forward, check))
    models_dir = Path(tempfile.mkdtemp(prefix="spex-gpu-check-"))  # not under `out`: eight files come back
    models = check.stage("models", lambda: build_models(check, models_dir))
    if models is None:
        return finish(check, {})
    profiles: dict[str, Path] = {}
    for name in [BENCH_SHAPE, *(n for n in SHAPES if n != BENCH_SHAPE)]:
        path = check.stage(f"profile {name}", partial(profile, check, name, models[name]), estimate_s=60.0)
        if path is not None:
            profiles[name] = path
        if name == BENCH_SHAPE and path is not None:
            cells(check, models[name], path)
    return finish(check, profiles)


def cells(check: Check, model: Path, profile_file: Path) -> None:
    """Each cell measured, then predicted; the table and the aims rewritten after each."""
    for cell in CELLS:
        key = f"{cell[0]}-{cell[1]} B={cell[2]}"
        estimate = max(check.durations, default=FIRST_CELL_S)
        began = time.monotonic()
        real = check.stage(
            f"bench {key}", partial(bench_cell, check, cell, model, profile_file, sim=False), estimate
        )
        if real is None:
            continue
        check.durations.append(time.monotonic() - began)
        sim = check.stage(f"predict {key}", partial(bench_cell, check, cell, model, profile_file, sim=True))
        catalog = bench_cell(check, cell, model, None, sim=True)  # deterministic, under a second
        check.cells[key] = {"real": real, "simulated": sim, "catalog": catalog}
        report(check, {BENCH_SHAPE: profile_file})


def report(check: Check, profiles: dict[str, Path]) -> None:
    """The table and the aims, written (after each cell, and at the end)."""
    check.summary["cells"] = cell_rows(check.cells)
    check.summary["aims"] = aims(
        check.cells, profiles, catalog_gpu(str(check.summary["environment"].get("gpu", "")))
    )
    check.write()


def finish(check: Check, profiles: dict[str, Path]) -> dict[str, Any]:
    report(check, profiles)
    where = str(check.summary["environment"].get("gpu", "this CPU (a dry run)"))
    check.stage("plot", lambda: plot(profiles, check.cells, check.out / "gpu-check.png", where))
    print_table(check.summary)
    return check.summary


class _Tee:
    """Standard output to the terminal and the log both."""

    def __init__(self, *streams: TextIO) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


def run_logged(out: Path, log_name: str, run: Callable[[Path], dict[str, Any]]) -> int:
    """`run(out)`'s output to the terminal and `out/log_name` both; the exit status: 1 if a
    stage of the summary it returns failed, else 0."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / log_name, "w") as log:
        stdout = sys.stdout
        sys.stdout = _Tee(stdout, log)  # type: ignore[assignment]
        try:
            summary = run(out)
        finally:
            sys.stdout = stdout
    failed = [name for name, s in summary["stages"].items() if s["status"].startswith("failed")]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spex.bench.gpu_check", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="gpu-check", help="where the files go (at most eight)")
    p.add_argument("--dry-run", action="store_true", help="the same stages on this CPU, with tiny shapes")
    p.add_argument(
        "--budget-s", type=float, default=None, help="stop starting stages after this (default 480)"
    )
    args = p.parse_args(argv)
    plan = DRY_RUN if args.dry_run else GPU
    if args.dry_run:  # the path a GPU runs (torch's), not this CPU's C kernels
        os.environ["SPEX_KERNELS"] = "torch"
    if args.budget_s is not None:
        plan = replace(plan, budget_s=args.budget_s)
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            p.exit(2, "gpu_check: torch sees no CUDA device here (--dry-run runs the stages on the CPU)\n")
    return run_logged(Path(args.out), "gpu-check.log", partial(run_check, plan))


if __name__ == "__main__":
    raise SystemExit(main())
