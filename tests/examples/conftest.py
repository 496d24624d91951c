"""The tiny random-weight model of tests/hf, for the examples' in-process runs."""

from tests.hf.conftest import tiny_model

__all__ = ["tiny_model"]
