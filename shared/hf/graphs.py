"""Decode passes replayed from CUDA graphs: a step's hundreds of small launches become one.

A decode pass (one row per sequence, every row's logits wanted) is padded to a bucketed row
count (`BATCHES`) and a bucketed key width (`WIDTHS`): the padded rows read and write the
pool's null slot and their logits are dropped. One graph per (rows, width) bucket is captured
the first time a pass needs it, and replayed after its inputs — token ids, positions, the
slots each row writes, the slot table and lengths (and the mask on the gather path) — are
copied in. Capturing is start-up work: `capture_s` counts it, and the engine leaves it out of
its clock. A pool that grows moves its tensors, which the graphs point into: they are dropped
and captured again. Passes with prompt rows run eagerly.

`capture=False` replays by running the same padded pass again over the same static inputs
(the tests on a CPU check the padding, the refilling and the invalidation there: what a graph
replays is exactly that computation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from spex.shared.hf.attention import Pass
from spex.shared.hf.paged import NULL_SLOT, WIDTHS, PagedAttention, bucket

__all__ = ["BATCHES", "DecodeGraphs"]

BATCHES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)  # rows a graph is captured for


class Forward(Protocol):
    """The forward pass a graph captures (`llama.LlamaRunner` is one)."""

    device: torch.device

    def compute(
        self, ids: torch.Tensor, positions: torch.Tensor, plan: object, want: torch.Tensor | None
    ) -> torch.Tensor:
        """Logits of the rows `want` (None: all) of the pass on ids and positions [rows]."""
        ...


@dataclass
class _Graph:
    replay: Callable[[], None]  # a captured CUDA graph's, or the same pass run again
    inputs: dict[str, torch.Tensor]  # ids, positions, and the plan's arrays, on the device
    logits: torch.Tensor  # [rows, vocab] what a replay writes


class DecodeGraphs:
    def __init__(
        self, runner: Forward, attention: PagedAttention, max_batch: int, capture: bool = True
    ) -> None:
        self.runner, self.attention, self.pool = runner, attention, attention.pool
        self.sizes = [b for b in BATCHES if b < max_batch] + [max_batch]
        self.capture = capture
        self.graphs: dict[tuple[int, int], _Graph] = {}
        self.capture_s = 0.0
        self.version = attention.pool.version
        # One memory pool for every graph: they replay one at a time, and a replay's logits
        # are copied out before the next.
        self.mempool = torch.cuda.graph_pool_handle() if capture else None

    def run(self, batch: Pass[Any]) -> torch.Tensor | None:
        """The pass's logits [rows, vocab] from a graph, or None when it is not a decode pass
        that fits one (it then runs eagerly)."""
        rows = batch.rows
        if rows > self.sizes[-1] or any(n != 1 for _, _, n in batch.runs):
            return None
        longest = max(sum(s.length for s in segments[:-1]) + start + 1 for segments, start, _ in batch.runs)
        if longest > WIDTHS[-1]:
            return None
        size, width = bucket(rows, self.sizes), bucket(longest, WIDTHS)
        arrays = self.attention.decode_arrays(batch, size, width)
        arrays["ids"] = np.zeros(size, dtype=np.int64)
        arrays["ids"][:rows] = batch.tokens
        arrays["positions"] = np.zeros(size, dtype=np.int64)
        arrays["positions"][:rows] = batch.positions
        if self.pool.version != self.version:  # the pool moved: the graphs point at the old one
            self.graphs.clear()
            self.version = self.pool.version
        graph = self.graphs.get((size, width)) or self._capture(size, width, arrays)
        for name, tensor in graph.inputs.items():
            tensor.copy_(torch.from_numpy(arrays[name]), non_blocking=True)
        graph.replay()
        return graph.logits[:rows].clone()  # the next replay overwrites it; a paused sequence keeps its row

    def _capture(self, size: int, width: int, arrays: dict[str, np.ndarray]) -> _Graph:
        start = time.perf_counter()
        device = self.runner.device
        inputs = {name: torch.from_numpy(a).to(device, copy=True) for name, a in arrays.items()}
        for name in ("write", "table"):  # what the capture's runs write and read: the null slot
            inputs[name].fill_(NULL_SLOT)
        plan = self.attention.static_plan({k: v for k, v in inputs.items() if k not in ("ids", "positions")})
        args = (inputs["ids"], inputs["positions"], plan, None)
        if self.capture:
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):  # warm-up off the capture: kernels built, handles made
                for _ in range(2):
                    self.runner.compute(*args)
            torch.cuda.current_stream(device).wait_stream(side)
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph, pool=self.mempool):
                logits = self.runner.compute(*args)
            torch.cuda.synchronize(device)
            graph = _Graph(cuda_graph.replay, inputs, logits)
        else:
            logits = self.runner.compute(*args)

            def again() -> None:
                logits.copy_(self.runner.compute(*args))

            graph = _Graph(again, inputs, logits)
        self.capture_s += time.perf_counter() - start
        self.graphs[(size, width)] = graph
        return graph
