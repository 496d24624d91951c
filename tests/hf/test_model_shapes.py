"""Random-weight models of the simulator catalog's shapes (`spex model init --shape`): each
shape is the model the catalog budgets (its KV bytes, layers, width and parameters), written
as a config and a tokenizer only, its weights built from the seed where it loads."""

import json
from dataclasses import replace

import pytest
import torch

from spex.cli.main import main
from spex.shared.hf.engine import HFEngine
from spex.shared.hf.models import ModelSpec, init_model, load_lm
from spex.shared.hf.shapes import RANDOM_WEIGHTS, SHAPES
from spex.shared.roofline.hardware import MODELS


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_shape_is_the_model_the_catalog_budgets(name):
    shape, model = SHAPES[name], MODELS[name]
    assert shape.layers == model.n_layers and shape.hidden == model.d_model
    assert 2 * shape.layers * shape.kv_heads * shape.head_dim * 2 == model.kv_bytes_per_token  # bf16
    attention = shape.hidden * shape.head_dim * (2 * shape.heads + 2 * shape.kv_heads)
    params = shape.layers * (attention + 3 * shape.hidden * shape.intermediate) + shape.vocab * shape.hidden
    assert params == pytest.approx(model.matmul_params, rel=0.01)


def test_init_writes_a_config_and_a_tokenizer_and_no_weights(tmp_path, capsys):
    out = tmp_path / "llemma"
    assert main(["model", "init", "--shape", "Llemma-7B", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_key_value_heads"], config["vocab_size"]) == (
        32,
        32,
        32016,
    )
    assert config[RANDOM_WEIGHTS] == 0 and (out / "tokenizer.json").is_file()
    assert not list(out.glob("*.safetensors")) and not list(out.glob("*.bin"))
    assert "Llemma-7B's shape" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shape", "Llama-9B"], "--shape: one of Llemma-7B, R1-Qwen3-8B, not 'Llama-9B'"),
        (
            ["--shape", "Llemma-7B", "--layers", "4"],
            "--shape: sets the model's dimensions itself; drop --layers",
        ),
        (["--shape", "Llemma-7B", "--prm"], "drop --prm"),
    ],
)
def test_a_bad_shape_request_is_one_line_naming_the_flag(tmp_path, capsys, argv, message):
    assert main(["model", "init", *argv, "--out", str(tmp_path / "m")]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_shaped_model_s_weights_are_built_from_its_seed_where_it_loads(tmp_path, name):
    path = init_model(ModelSpec(shape=SHAPES[name].tiny(), seed=3), tmp_path / name)
    first, again = load_lm(path), load_lm(path)
    assert first.config.model_type == SHAPES[name].architecture
    assert first.config.num_attention_heads // first.config.num_key_value_heads == (
        SHAPES[name].heads // SHAPES[name].kv_heads
    )
    for (key, a), (_, b) in zip(first.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), key
    assert load_lm(path, dtype="bfloat16").model.embed_tokens.weight.dtype == torch.bfloat16
    engine = HFEngine.from_dir(path)  # and it runs: the engine's forward pass takes its architecture
    assert engine.runner.model.config.model_type == SHAPES[name].architecture


def test_weights_that_cannot_fit_are_refused_up_front_in_one_line(tmp_path):
    huge = replace(SHAPES["Llemma-7B"].tiny(), vocab=2_000_000_000)  # ~1 TB of embeddings in float32
    path = init_model(ModelSpec(shape=huge), tmp_path / "huge")
    with pytest.raises(ValueError, match=r"its random weights take \d+\.\d GB in float32, and cpu has"):
        load_lm(path)
