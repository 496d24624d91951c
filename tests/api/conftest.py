"""The tiny random-weight model and reward model of tests/hf (built once per session, no
download), for the API's runs on the in-process engine."""

from tests.hf.conftest import tiny_model, tiny_prm

__all__ = ["tiny_model", "tiny_prm"]
