"""The `spex` commands of the distributed runtime and of local models (`spex model init`)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

__all__ = ["model_init", "runtime_command"]


def model_init(args: argparse.Namespace, console: Console) -> int:
    """Build a random-weight Llama-architecture model with a real tokenizer, offline."""
    from spex.shared.hf.models import ModelSpec, init_model

    spec = ModelSpec(args.layers, args.hidden, args.vocab, dtype=args.dtype, seed=args.seed, prm=args.prm)
    spec.validate()
    out = init_model(spec, args.out)
    kind = "reward model" if args.prm else "model"
    console.print(f"{kind}: {out} ({args.layers} layers, hidden {args.hidden}, random weights)")
    return 0


def runtime_command(args: argparse.Namespace, console: Console) -> int:
    """`spex worker`, `up`, `demo`, `submit`, `result` (services are imported only here)."""
    import asyncio
    import importlib
    from pathlib import Path

    from spex.shared.runtime.settings import Settings

    if getattr(args, "redis", None) and "@" in args.redis.partition("://")[2].split("/")[0]:
        raise ValueError(
            "--redis: no password in the URL (other users see it in ps); use SPEX_REDIS_PASSWORD "
            "or --redis-password-file"
        )
    if args.command == "chaos":
        return _chaos(args, console)
    if args.command == "worker":
        return int(importlib.import_module(f"spex.services.{args.service}").main())
    if args.command in ("up", "demo"):
        from spex.services.launcher import demo, engine_urls, serve_forever

        if getattr(args, "generators", 1) < 1:
            raise ValueError("--generators: must be at least 1")
        if args.command == "up":
            engine = args.engine or ("hf" if args.model else None)
            content = args.content or ("real" if engine == "hf" else None)
            settings = Settings.from_env(
                None,
                time_scale=args.time_scale,
                engine=engine,
                engine_url=args.engine_url,
                model=args.model,
                prm=args.prm,
                content=content,
                deterministic=args.deterministic,
                max_step_tokens=args.max_step_tokens,
                max_depth=args.max_depth,
                http_host=args.host,
                http_port=args.port,
                metrics_port=args.metrics_port,
                redis_password_file=args.redis_password_file,
            )
            if settings.engine in ("vllm", "sglang"):
                engine_urls(settings.engine_url, args.generators)  # one URL, or one per generator
            data_dir = Path(args.data_dir) if args.data_dir else None
            return serve_forever(settings, args.redis, args.generators, console, data_dir, args.fsync)
        settings = Settings.from_env(None, time_scale=args.time_scale)
        if args.questions < 1 or args.target < 1:
            raise ValueError("--questions and --target: must be at least 1")
        return demo(settings, args.questions, args.algorithm, args.target, console)
    return asyncio.run(_client(args, console))


def _chaos(args: argparse.Namespace, console: Console) -> int:
    import asyncio
    import json
    from dataclasses import asdict

    from spex.bench.chaos.run import run_chaos

    if args.duration <= 0 or args.questions < 1 or args.faults_per_minute <= 0:
        raise ValueError("--duration, --questions and --faults-per-minute: must be positive")
    say = lambda msg: console.print(msg, markup=False, highlight=False)  # noqa: E731
    report = asyncio.run(
        run_chaos(
            args.seed,
            args.duration,
            args.questions,
            args.algorithm,
            args.target,
            args.mode,
            args.faults_per_minute,
            args.time_scale,
            say,
        )  # fmt: skip
    )
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(report.by_kind().items()))
    console.print(
        f"[bold]chaos seed {report.seed}[/]: {len(report.faults)} faults ({kinds}) in {report.wall_s:.0f} s"
    )
    restarted = {n: c for n, c in report.restarts.items() if c}
    console.print(f"restarts by the supervisor: {restarted or 'none'}")
    console.print(
        f"questions {report.questions}: lost {len(report.lost)}, duplicated {len(report.duplicated)}, "
        f"differing trees {len(report.differing)}"
    )
    for what in ("lost", "duplicated", "differing"):
        if getattr(report, what):
            console.print(f"  {what}: {', '.join(getattr(report, what))}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {**asdict(report), "faults": [asdict(x) for x in report.faults], "ok": report.ok}, f, indent=2
            )
    return 0 if report.ok else 1


async def _client(args: argparse.Namespace, console: Console) -> int:
    from spex.shared.content.datasets import load_questions
    from spex.shared.runtime.client import IngressClient
    from spex.shared.runtime.connect import redis_client
    from spex.shared.runtime.settings import Settings

    settings = Settings.from_env(None, redis_url=args.redis, redis_password_file=args.redis_password_file)
    client = IngressClient(redis_client(settings), limits=settings.limits)
    try:
        if args.command == "result":
            answer = await client.result(args.query_id, args.wait)
            if answer is None:
                console.print(f"{args.query_id}: no answer yet")
                return 1
            _print_answer(console, answer)
            return 0
        asked = [(args.question, args.reference)] if args.question else []
        if args.file:
            asked += [(q.text, q.reference_answer) for q in load_questions(args.file, require_answer=False)]
        if not asked:
            raise ValueError("submit: give a question, or --file with a 'question' or 'problem' per line")
        qids = []
        for i, (question, reference) in enumerate(asked):
            key = f"{args.client_key}/{i}" if args.client_key else None
            qids.append(
                await client.submit(
                    question,
                    client_key=key,
                    algorithm=args.algorithm,
                    target=args.target,
                    mode=args.mode,
                    reference_answer=reference,
                )
            )
        for qid in qids:
            answer = await client.result(qid, args.wait) if args.wait else None
            if answer is None:
                console.print(qid if not args.wait else f"{qid}: no answer within {args.wait} s")
            else:
                _print_answer(console, answer)
        return 0
    finally:
        await client.aclose()


def _print_answer(console: Console, answer: Any) -> None:
    """The query's answer, graded if it had a reference, then the steps of its solution."""
    grade = {True: " (correct)", False: " (wrong)", None: ""}[answer.correct]
    console.print(f"{answer.query_id}: {answer.answer}{grade}", markup=False)
    for i, step in enumerate(answer.solution, 1):
        console.print(f"  step {i}: {step}", markup=False, highlight=False)
