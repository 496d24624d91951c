"""The `spex` commands of the distributed runtime and of local models (`spex model init`)."""

from __future__ import annotations

import argparse

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

    from spex.shared.runtime.settings import Settings

    if args.command == "worker":
        return int(importlib.import_module(f"spex.services.{args.service}").main())
    if args.command in ("up", "demo"):
        from spex.services.launcher import demo, serve_forever

        if getattr(args, "generators", 1) < 1:
            raise ValueError("--generators: must be at least 1")
        settings = Settings.from_env(None, time_scale=args.time_scale)
        if args.command == "up":
            return serve_forever(settings, args.redis, args.generators, console)
        if args.questions < 1 or args.target < 1:
            raise ValueError("--questions and --target: must be at least 1")
        return demo(settings, args.questions, args.algorithm, args.target, console)
    return asyncio.run(_client(args, console))


async def _client(args: argparse.Namespace, console: Console) -> int:
    import json

    import redis.asyncio as aioredis

    from spex.shared.runtime.client import IngressClient

    client = IngressClient(aioredis.Redis.from_url(args.redis))
    try:
        if args.command == "result":
            answer = await client.result(args.query_id, args.wait)
            console.print(answer if answer else f"{args.query_id}: no answer yet")
            return 0 if answer else 1
        questions = [args.question] if args.question else []
        if args.file:
            with open(args.file) as f:
                for n, line in enumerate(f, 1):
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        raise ValueError(f"--file {args.file}: line {n} is not JSON") from None
                    questions.append(row.get("question") or row.get("problem") or "")
        if not questions or not all(questions):
            raise ValueError("submit: give a question, or --file with a 'question' or 'problem' per line")
        qids = []
        for i, q in enumerate(questions):
            key = f"{args.client_key}/{i}" if args.client_key else None
            qids.append(
                await client.submit(
                    q, client_key=key, algorithm=args.algorithm, target=args.target, mode=args.mode
                )
            )
        for qid in qids:
            answer = await client.result(qid, args.wait) if args.wait else None
            console.print(qid if answer is None else f"{qid}: {answer.answer}")
        return 0
    finally:
        await client.r.aclose()
