"""A step-time curve measured on a real engine (`spex profile --engine hf --json F`), in the
shape the budgeting code reads a simulated profile: `decode_step_s(batch, context_tokens)`.

The file holds cells (batch, context per sequence, time per decode step, time to the first
token). A cell the engine could not hold (a GPU profile skips what does not fit in its KV
pool) is extrapolated along the batch from the measured cells of its context, which must be
at least two. A step is taken never to get cheaper with more batch or more context (a noisy
cell is raised to the largest before it on either axis). Between measured points the step time is
interpolated linearly, in batch and in context; past the largest batch it grows along the last
two batches' slope, past the longest context along the last two contexts'; below the smallest
it is the smallest point's. With it, speculation on a real engine is budgeted the way it is on
the simulated GPU: the spare concurrency at the governor's slack
(`capacity.spare_concurrency`), and the counterfactual step time without speculation that the
governor steers by (`counterfactual_s`).

A server also costs time per request that no decode step shows: its API process tokenizes the
prompt, schedules, detokenizes and answers, on the engine's core here. The cells' time to the
first token of `batch` fresh prompts submitted together is taken as `batch` such costs, the
prefill of their `batch × context` tokens and one step; a least-squares fit of `first - step =
request_s × batch + prefill_s_per_token × batch × context` over the cells (in relative errors)
gives both (neither below 0). A server's profile also probes `request_s` directly
(`meta.request_probe`: a one-token request whose prompt is cached but for a few tokens, less
one forward pass and those tokens); the prefill rate is then the batch-1 cell's at the
shortest context, less that cost. An in-process engine has no such cost: its profile fits the
prefill rate alone. The simulator charges `request_s` to the first step that prefills a
request. A server's prefix cache hits in whole blocks (vLLM: 128 tokens on this CPU build):
the file's `meta.server.block_size` says so, and the simulator's hits are whole blocks too,
shared within a step (`sim.engine`).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from spex.shared.roofline.hardware import Profile

__all__ = [
    "Cell",
    "MeasuredProfile",
    "MeasuredSimProfile",
    "load_measured",
    "measured_sim_profile",
    "parse_measured",
    "profile_json",
]


@dataclass(frozen=True)
class Cell:
    batch: int
    context: int
    tpot_s: float  # median over repeats of the mean time per output token
    tokens_per_s: float  # batch / tpot_s
    # Median over repeats of the mean time to the first token of `batch` fresh prompts:
    # their prefill and one step (what the simulator's prefill rate is read from).
    first_token_s: float = 0.0

    @property
    def step_ms(self) -> float:
        return self.tpot_s * 1e3


def profile_json(cells: list[Cell], meta: dict[str, object]) -> str:
    """The profile file's text (what `parse_measured` reads): `meta` and the cells."""
    rows = [{**asdict(c), "step_ms": c.step_ms} for c in cells]
    return json.dumps({"meta": meta, "cells": rows}, indent=2)


@dataclass(frozen=True)
class MeasuredProfile:
    name: str
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    step_s: tuple[tuple[float, ...], ...]  # [batch index][context index]
    # Prefill time per prompt token and the fixed cost of one request beside its steps (a
    # server's: probed, or fitted to the cells' times to the first token; module docstring).
    prefill_s_per_token: float = 0.0
    kv_capacity_tokens: int | None = None  # the engine's KV, when the file says
    request_s: float = 0.0
    cache_block_tokens: int = 1  # the prefix cache's granularity (1: any prefix hits)
    # The in-process engine's mode the curve was measured in (the file's meta), where it says.
    deterministic: bool | None = None
    dtype: str | None = None

    def mode_differs(self, deterministic: bool, dtype: str | None) -> str | None:
        """What of an in-process engine's mode (`dtype` None: as saved, not compared) differs
        from the one this curve was measured in, in words (None: nothing it records): a curve of
        another mode prices the engine's steps wrongly (deterministic kernels cost more)."""
        if self.deterministic is not None and self.deterministic != deterministic:
            was, now = ("on", "off") if self.deterministic else ("off", "on")
            return f"measured with deterministic kernels {was}, the engine runs with them {now}"
        if dtype and self.dtype and dtype != self.dtype:
            return f"measured in {self.dtype}, the engine runs in {dtype}"
        return None

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        """One decode step of `batch` sequences whose contexts sum to `context_tokens`."""
        if batch <= 0:
            return 0.0
        per_seq = context_tokens / batch
        return max(
            0.0, _along(self.batches, [self._at_context(i, per_seq) for i in range(len(self.batches))], batch)
        )

    def mixed_step_s(self, batch: int, ctx_sum: float, chunks: Sequence[tuple[float, float]]) -> float:
        """A decode step of `batch` sequences with prompt rows beside it (`chunks`: new tokens
        and their prefix each), each prompt token at the measured prefill rate."""
        return self.decode_step_s(batch, ctx_sum) + self.prefill_s_per_token * sum(n for n, _ in chunks)

    def counterfactual_s(
        self, measured_s: float, primaries: int, primary_ctx: float, batch: int, ctx: float
    ) -> float:
        """What a step measured at `measured_s` with `batch` sequences (contexts `ctx`) would
        have taken with its `primaries` alone (contexts `primary_ctx`): scaled by the curve."""
        full = self.decode_step_s(batch, ctx)
        return measured_s * self.decode_step_s(primaries, primary_ctx) / full if full > 0 else measured_s

    def _at_context(self, i: int, per_seq: float) -> float:
        return _along(self.contexts, list(self.step_s[i]), per_seq)


def _along(xs: tuple[int, ...], ys: list[float], x: float) -> float:
    """ys at x: linear between points, the last segment's slope past the end, flat before."""
    if len(xs) == 1 or x <= xs[0]:
        return ys[0]
    j = min(max(bisect.bisect_right(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[j - 1], xs[j], ys[j - 1], ys[j]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def load_measured(path: str | Path) -> MeasuredProfile:
    """A profile file written by `spex profile --json`; a bad one is a one-line ValueError
    naming the file."""
    where = f"--profile-file {str(path)!r}"
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    return parse_measured(text, where, Path(path).stem)


def parse_measured(text: str | bytes, where: str, name: str = "measured") -> MeasuredProfile:
    """A profile in `spex profile --json`'s format; a bad one is a one-line ValueError that
    starts with `where`."""
    try:
        report = json.loads(text)
        cells = {(_whole(c["batch"]), _whole(c["context"])): float(c["tpot_s"]) for c in report["cells"]}
        name = str(report.get("meta", {}).get("engine", name))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{where}: not a profile from `spex profile --json` ({exc})") from None
    batches = tuple(sorted({b for b, _ in cells}))
    contexts = tuple(sorted({c for _, c in cells}))
    if not cells or min(batches) < 1 or min(contexts) < 1:
        raise ValueError(f"{where}: no cells, or a batch or context below 1")
    if not all(math.isfinite(t) and t > 0 for t in cells.values()):
        raise ValueError(f"{where}: batches, contexts and step times must be positive")
    for c in contexts:  # a cell the engine could not hold: along the batch from its context's
        measured = [b for b in batches if (b, c) in cells]
        if len(measured) < 2 and len(measured) < len(batches):
            raise ValueError(f"{where}: its cells do not fill a batch × context grid (context {c})")
        ys = [cells[(b, c)] for b in measured]
        for b in batches:
            cells.setdefault((b, c), _along(tuple(measured), ys, b))
    grid = [[cells[(b, c)] for c in contexts] for b in batches]
    for i, row in enumerate(grid):  # monotone on both axes
        for j in range(len(row)):
            row[j] = max(row[j], row[j - 1] if j else 0.0, grid[i - 1][j] if i else 0.0)
    meta = report.get("meta", {})
    curve = MeasuredProfile(name, batches, contexts, tuple(tuple(row) for row in grid))
    server = isinstance(meta.get("server"), dict)  # a server's profile; else in process (no API)
    request_s, prefill_s = _first_token_fit(report["cells"], fit_request=server)
    probed = _probed_request_s(meta.get("request_probe"), curve, prefill_s) if server else None
    if probed is not None:
        request_s, prefill_s = probed, _prefill_beside(report["cells"], probed) or prefill_s
    kv = meta.get("kv_capacity_tokens")
    return replace(
        curve,
        prefill_s_per_token=prefill_s,
        kv_capacity_tokens=int(kv) if isinstance(kv, int) and kv > 0 else None,
        request_s=request_s,
        cache_block_tokens=_block_tokens(meta.get("server")),
        deterministic=meta["deterministic"] if isinstance(meta.get("deterministic"), bool) else None,
        dtype=meta["dtype"] if isinstance(meta.get("dtype"), str) and meta["dtype"] else None,
    )


def _probed_request_s(probe: object, curve: MeasuredProfile, prefill_s: float) -> float | None:
    """A request's own cost from the server profile's probe (`engine_speed.measure_server`):
    a cached one-token request's time less the one forward pass it ran and its few uncached
    tokens' prefill (None: no probe)."""
    if not isinstance(probe, dict):
        return None
    try:
        e2e_s, context = float(probe["e2e_s"]), float(probe["context"])
        uncached = float(probe.get("uncached", 0))
    except (KeyError, TypeError, ValueError):
        return None
    if not math.isfinite(e2e_s):
        return None
    return max(0.0, e2e_s - curve.decode_step_s(1, context) - prefill_s * uncached)


def _timed_rows(cells: list[dict]) -> list[tuple[float, float, float]]:
    """(batch, batch × context, first token less one step) of the cells that time a first token."""
    timed = [c for c in cells if isinstance(c.get("first_token_s"), int | float) and c["first_token_s"] > 0]
    rows = [(c["batch"], c["batch"] * c["context"], c["first_token_s"] - c["tpot_s"]) for c in timed]
    return [row for row in rows if row[2] > 0]


def _first_token_fit(cells: list[dict], fit_request: bool = True) -> tuple[float, float]:
    """(request_s, prefill_s_per_token) fitted to the cells that record a time to the first
    token: least squares of `first - step` on `batch` and `batch × context`, each cell weighed
    by its own size (relative errors: the short prompts a search's steps send count as much as
    the long ones), neither term below 0 (one alone refitted when the other would be). Without
    `fit_request` (an in-process engine: no API server) the prefill term alone. (0, 0) without
    such cells."""
    rows = _timed_rows(cells)
    if not rows:
        return 0.0, 0.0
    y = np.array([v for _, _, v in rows])
    x = np.array([(b, t) for b, t, _ in rows]) / y[:, None]  # relative: each row over its own y
    ones = np.ones(len(rows))
    fit = np.linalg.lstsq(x, ones, rcond=None)[0] if fit_request and len(rows) > 1 else np.array([-1.0, -1.0])
    if fit.min() >= 0:
        return float(fit[0]), float(fit[1])
    alone = [float(x[:, i] @ ones / (x[:, i] @ x[:, i])) for i in (0, 1)]  # one term: y ≈ k·x
    errors = [float(np.sum((ones - k * x[:, i]) ** 2)) for i, k in enumerate(alone)]
    return (alone[0], 0.0) if fit_request and errors[0] < errors[1] else (0.0, alone[1])


def _prefill_beside(cells: list[dict], request_s: float) -> float | None:
    """The prefill rate beside a probed request cost: the batch-1 cells' (their one request
    waits on no other), at the shortest context (its prefill nearly all per-token work, as a
    search's short extends are; the median over repeats already). None where it comes out
    at or below 0."""
    single = [(t, first) for b, t, first in _timed_rows(cells) if b == 1]
    if not single:
        return None
    tokens, first = min(single)
    return (first - request_s) / tokens if first > request_s else None


def _block_tokens(server: object) -> int:
    """A server's prefix-cache block (vLLM's `block_size` with prefix caching on), else 1."""
    if not isinstance(server, dict) or str(server.get("enable_prefix_caching")) != "True":
        return 1
    try:
        return max(1, int(str(server.get("block_size"))))
    except ValueError:
        return 1


@dataclass(frozen=True)
class MeasuredSimProfile(Profile):
    """A simulated GPU that steps as a measured engine did: the decode step from the measured
    curve, prefill at its measured rate per token (a mixed step pays both), the KV pool the
    engine reported, its per-request cost and its prefix-cache block. The model and GPU it
    names (`base`) are what T2's memory weights and the roofline utilization read; the timing
    is the curve's."""

    curve: MeasuredProfile | None = None

    @property
    def name(self) -> str:
        return f"{self.curve.name if self.curve else '?'} (measured)"

    @property
    def kv_capacity_tokens(self) -> int:
        if self.curve is not None and self.curve.kv_capacity_tokens:
            return self.curve.kv_capacity_tokens
        return super().kv_capacity_tokens

    @property
    def request_s(self) -> float:
        return self.curve.request_s if self.curve is not None else 0.0

    @property
    def cache_block_tokens(self) -> int:
        return self.curve.cache_block_tokens if self.curve is not None else 1

    def decode_step_s(self, batch: int, ctx_sum: float) -> float:
        assert self.curve is not None
        return self.curve.decode_step_s(batch, ctx_sum)

    def mixed_step_s(self, batch: int, ctx_sum: float, chunks: Sequence[tuple[float, float]]) -> float:
        """The decode step of every sequence in it (one being prefilled counts as one over its
        prefix) plus the prefill of the chunks' new tokens."""
        assert self.curve is not None
        if batch <= 0 and not chunks:
            return 0.0
        prefix = sum(p for _, p in chunks)
        new = sum(n for n, _ in chunks)
        decode = self.curve.decode_step_s(batch + len(chunks), ctx_sum + prefix)
        return decode + self.curve.prefill_s_per_token * new


def measured_sim_profile(base: Profile, curve: MeasuredProfile) -> MeasuredSimProfile:
    return MeasuredSimProfile(base.gpu, base.model, curve)


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"{value!r} is not a whole number")
    return int(value)
