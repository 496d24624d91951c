"""Which torch device the in-process engine runs on: checked up front, so a bad `--device`
is one line naming it rather than a traceback from deep in torch."""

from __future__ import annotations

import re

__all__ = ["check_device"]


def check_device(device: str, name: str = "--device") -> None:
    """`cpu`, `cuda` or `cuda:N`, and a CUDA device only where torch sees one."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ValueError(f"{name}: the hf engine runs on cpu or cuda (cuda:N), not {device!r}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"{name}: {device!r}, but torch sees no CUDA device here")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ValueError(f"{name}: {device!r}, but torch sees {torch.cuda.device_count()} CUDA device(s)")
