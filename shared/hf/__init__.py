"""The in-process PyTorch engine (`engine`), its prefix cache (`kvcache`), its forward pass
over a Llama model's weights (`llama`), the process reward model (`reward`) and
random-weight models for tests and timing (`models`). Imports torch and transformers:
install the `hf` extra."""
