"""The in-process PyTorch engine (`engine`), its prefix cache (`kvcache`), the process reward
model (`reward`) and random-weight models for tests and timing (`models`). Imports torch and
transformers: install the `hf` extra."""
