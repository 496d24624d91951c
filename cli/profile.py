"""`spex profile`: the decode step by batch × context — a simulated profile's curve, or measured
on a real engine (the in-process engine, a live vLLM or SGLang server), written as the profile
file that `spex bench --profile-file` reads."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from spex.shared.engine.api import ENGINES, SERVERS
from spex.shared.roofline.hardware import GPUS, MODELS, Profile, parse_profile

if TYPE_CHECKING:
    from spex.shared.roofline.measured import Cell

__all__ = ["add_profile_parser", "profile_command"]


def add_profile_parser(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser(
        "profile",
        help="the decode step by batch × context: a simulated profile's, or measured on the hf engine",
    )
    pr.add_argument(
        "--engine",
        choices=list(ENGINES),
        default="sim",
        help="sim: a catalog profile; hf: measure in process; vllm, sglang: measure a live server",
    )
    pr.add_argument("--engine-url", default=None, help="vllm, sglang: the server's URL")
    pr.add_argument(
        "--against",
        default=None,
        metavar="URL",
        help="hf: then the same cells on this vLLM server, side by side (tokens/s and their ratio)",
    )
    pr.add_argument("--gpu", default=None, choices=sorted(GPUS), help="sim: the GPU")
    pr.add_argument(
        "--model", default=None, help=f"sim: one of {', '.join(sorted(MODELS))}; hf: a model directory"
    )
    pr.add_argument("--batches", default=None, help="default sim 1,2,4,…,256; hf 1,4,8,16")
    pr.add_argument("--contexts", default=None, help="default sim 128,512,1024,2048; hf 128,512,2048")
    pr.add_argument("--slack", type=float, default=0.10, help="step growth that still counts as flat")
    pr.add_argument("--new-tokens", type=int, default=32, help="tokens each request makes (hf: at least 3)")
    pr.add_argument("--repeats", type=int, default=3, help="hf: runs per cell (the median is kept)")
    pr.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default=None,
        help="hf: weights and KV (default: as saved; bf16 on a GPU)",
    )
    pr.add_argument("--device", default="cpu", help="hf: torch device (cuda on a GPU machine)")
    pr.add_argument(
        "--no-cuda-graphs",
        dest="cuda_graphs",
        action="store_false",
        help="hf on CUDA: decode passes run eagerly",
    )
    pr.add_argument("--deterministic", action="store_true", help="hf: batch-invariant outputs")
    pr.add_argument(
        "--json",
        default=None,
        help="write the cells here (and a plot beside it): a step curve for --profile-file",
    )


def profile_command(args: argparse.Namespace, console: Console) -> int:
    if args.against is not None and args.engine != "hf":
        raise ValueError("--against: compares the hf engine with a server (--engine hf --model DIR)")
    if args.engine == "hf":
        return _measured_profile(args, console)
    if args.engine in SERVERS:
        return _server_profile(args, console)
    if args.gpu is None or args.model not in MODELS:
        raise ValueError(
            f"--gpu and --model: one of {', '.join(sorted(MODELS))} (or --engine hf --model DIR)"
        )
    profile: Profile = parse_profile(f"{args.model}@{args.gpu}")
    batches = _ints(args.batches or "1,2,4,8,16,32,64,128,256", "--batches")
    contexts = _ints(args.contexts or "128,512,1024,2048", "--contexts")
    table = Table("batch", *(f"ctx {c}" for c in contexts), title=f"decode step (ms), {profile.name}")
    for b in batches:
        table.add_row(str(b), *(f"{profile.decode_step_s(b, b * c) * 1e3:.1f}" for c in contexts))
    console.print(table)
    from spex.shared.sim.sweep import measure_knee

    knees = ", ".join(f"ctx {c}: {measure_knee(profile, c, args.slack)}" for c in contexts)
    console.print(
        f"KV pool {profile.kv_capacity_tokens:,} tokens; "
        f"calibration {profile.gpu.family}: {profile.gpu.calibration}"
    )
    console.print(
        f"k_total (concurrency within +{args.slack:.0%} of the batch-1 step, measured by sweeping): {knees}"
    )
    return 0


def _measured_profile(args: argparse.Namespace, console: Console) -> int:
    """Sweep the in-process engine on a real model: a table of step time and tokens/s."""
    batches = _ints(args.batches or "1,4,8,16", "--batches")
    contexts = _ints(args.contexts or "128,512,2048", "--contexts")
    if args.model is None or not Path(args.model, "config.json").is_file():
        raise ValueError(f"--model: {args.model!r} is not a model directory (no config.json)")
    if args.against is not None:
        from spex.bench.vtime.config import check_url  # the benchmark loads when it runs

        check_url(args.against, "--against")
    if args.new_tokens < 3:
        raise ValueError(
            "--new-tokens: at least 3 (a cell's step is timed with every request decoding, none done)"
        )
    if args.repeats < 1:
        raise ValueError("--repeats: at least 1")
    from spex.shared.hf.devices import check_device

    check_device(args.device)
    import torch

    from spex.bench.engine_speed import write_report
    from spex.bench.hf_profile import profile_engine
    from spex.shared.hf.sweep import measure_hf

    engine = profile_engine(
        args.model,
        batches,
        contexts,
        args.new_tokens,
        args.device,
        args.dtype,
        args.deterministic,
        args.cuda_graphs,
    )
    cells, skipped = measure_hf(engine, batches, contexts, args.new_tokens, args.repeats)
    threads = f"{torch.get_num_threads()} threads" if args.device == "cpu" else _device_name(args.device)
    dtype = str(engine.runner.dtype).removeprefix("torch.")
    name = f"{Path(args.model).name}@hf ({dtype}, {threads})"
    table = Table("batch", *(f"ctx {c}" for c in contexts), title=f"decode step (ms) / tokens/s, {name}")
    for b in batches:
        row = {c.context: c for c in cells if c.batch == b}
        table.add_row(
            str(b),
            *(
                f"{row[c].step_ms:.1f} / {row[c].tokens_per_s:.1f}" if c in row else "does not fit"
                for c in contexts
            ),
        )
    console.print(table)
    meta: dict[str, object] = {
        "engine": name,
        "deterministic": args.deterministic,
        "new_tokens": args.new_tokens,
    }
    meta |= {
        "repeats": args.repeats,
        "device": args.device,
        "dtype": dtype,
        "cuda_graphs": engine.runner.graphs is not None,
    }
    meta |= {"kv_capacity_tokens": engine.capacity_tokens, "skipped": [list(cell) for cell in skipped]}
    if args.against is not None:
        meta |= _side_by_side(args, cells, batches, contexts, console)
    if args.json:
        write_report(cells, meta, Path(args.json))
        _wrote(args.json, console)
    return 0


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def _side_by_side(
    args: argparse.Namespace, cells: list[Cell], batches: list[int], contexts: list[int], console: Console
) -> dict[str, object]:
    """The hf cells just measured against the same cells on a vLLM server (measured after)."""
    from spex.bench.engine_speed import measure_server
    from spex.shared.serving import EngineUnavailable, open_engine

    server = open_engine("vllm", args.against, timeout_s=300.0)
    try:
        theirs, _ = measure_server(server, batches, contexts, args.new_tokens, args.repeats, probe=False)
    except EngineUnavailable as exc:
        raise ValueError(f"--against: {exc}") from None
    info = server.backend.server_info
    at = {(c.batch, c.context): c for c in theirs}
    table = Table(
        "batch",
        *(f"ctx {c}" for c in contexts),
        title=f"tokens/s: hf / vLLM {info.get('version', '')} (hf ÷ vLLM)",
    )
    for b in batches:
        row = {c.context: c for c in cells if c.batch == b}
        table.add_row(
            str(b),
            *(
                f"{row[c].tokens_per_s:.1f} / {at[(b, c)].tokens_per_s:.1f} "
                f"({row[c].tokens_per_s / at[(b, c)].tokens_per_s:.2f})"
                for c in contexts
            ),
        )
    console.print(table)
    return {"against": {"server": info, "cells": [asdict(c) for c in theirs]}}


def _server_profile(args: argparse.Namespace, console: Console) -> int:
    """Sweep a live server: the same cells and report as `--engine hf`."""
    from spex.bench.engine_speed import measure_server, write_report
    from spex.bench.vtime.config import check_url
    from spex.shared.serving import EngineUnavailable, open_engine

    batches = _ints(args.batches or "1,4,8,16", "--batches")
    contexts = _ints(args.contexts or "128,512,2048", "--contexts")
    check_url(args.engine_url, "--engine-url")
    if args.new_tokens < 2 or args.repeats < 1:
        raise ValueError("--new-tokens must be at least 2 and --repeats at least 1")
    engine = open_engine(args.engine, args.engine_url, timeout_s=300.0)
    try:
        cells, probe = measure_server(engine, batches, contexts, args.new_tokens, args.repeats)
    except EngineUnavailable as exc:
        raise ValueError(f"--engine-url: {exc}") from None
    info = engine.backend.server_info
    name = f"{Path(str(info.get('model', '?'))).name}@{args.engine} {info.get('version', '')}".strip()
    table = Table("batch", *(f"ctx {c}" for c in contexts), title=f"decode step (ms) / tokens/s, {name}")
    for b in batches:
        row = {c.context: c for c in cells if c.batch == b}
        table.add_row(str(b), *(f"{row[c].step_ms:.1f} / {row[c].tokens_per_s:.1f}" for c in contexts))
    console.print(table)
    if args.json:
        meta = {"engine": name, "server": info, "new_tokens": args.new_tokens, "repeats": args.repeats}
        meta["request_probe"] = probe
        write_report(cells, meta | {"kv_capacity_tokens": engine.server.kv_capacity}, Path(args.json))
        _wrote(args.json, console)
    return 0


def _wrote(path: str, console: Console) -> None:
    """Where the profile went, and what the simulator reads from it beside the curve."""
    from spex.shared.roofline.measured import load_measured

    curve = load_measured(path)
    console.print(f"wrote {path} and {Path(path).with_suffix('.png')}")
    console.print(
        f"{curve.request_s * 1e3:.1f} ms a request beside its steps, "
        f"{curve.prefill_s_per_token * 1e3:.3f} ms a prompt token, prefix-cache block "
        f"{curve.cache_block_tokens} token(s): from the first-token times and the request probe, "
        "what `spex bench --engine sim --profile-file` charges"
    )


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a comma-separated list of whole numbers") from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag}: every value must be at least 1")
    return values
