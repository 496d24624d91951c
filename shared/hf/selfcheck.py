"""A GPU kernel checked against its reference before the engine uses it: where it cannot
run, or computes something else, the engine says so and keeps the reference's path."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

__all__ = ["passes"]

log = logging.getLogger(__name__)

LOW_PRECISION_TOLERANCE = 2e-2  # bfloat16 and float16: a few roundings of the output


def passes(what: str, instead: str, check: Callable[[], float], dtype: torch.dtype, tolerance: float) -> bool:
    """`check()` (the kernel's largest relative error against its reference, on random rows)
    within `tolerance` in float32 and a rounding's worth otherwise; a warning naming `what`
    and what runs `instead` when not."""
    try:
        error = check()
    except Exception as exc:  # noqa: BLE001 - a kernel that cannot run here is not used
        log.warning("%s unavailable (%s): %s runs instead", what, exc, instead)
        return False
    if not error <= (tolerance if dtype == torch.float32 else LOW_PRECISION_TOLERANCE):
        log.warning("%s off by %.3g: %s runs instead", what, error, instead)
        return False
    return True
