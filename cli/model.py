"""`spex model init`: a random-weight local model, built offline."""

from __future__ import annotations

import argparse

from rich.console import Console

__all__ = ["add_model_parser", "model_command"]


def add_model_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("model", help="local models: `spex model init` builds a random-weight one")
    m.add_argument("action", choices=["init"])
    m.add_argument("--out", required=True, help="the directory to write")
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=64)
    m.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary trained on the shipped MATH-500")
    m.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--prm", action="store_true", help="a reward model (token-classification head)")


def model_command(args: argparse.Namespace, console: Console) -> int:
    """Build a random-weight Llama-architecture model with a real tokenizer, offline."""
    from spex.shared.hf.models import ModelSpec, init_model

    spec = ModelSpec(args.layers, args.hidden, args.vocab, dtype=args.dtype, seed=args.seed, prm=args.prm)
    spec.validate()
    out = init_model(spec, args.out)
    kind = "reward model" if args.prm else "model"
    console.print(f"{kind}: {out} ({args.layers} layers, hidden {args.hidden}, random weights)")
    return 0
