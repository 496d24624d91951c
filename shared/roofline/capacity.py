"""Spare capacity: how many speculative sequences an engine can take beside its primary ones.

Both the real runtime (the budget allocator, from live generator load) and the simulator
(per-step pausing, the virtual-time pool) budget speculation with these two functions. The
slack they take is set per engine by a `TpotGovernor`: feedback that holds the primary jobs'
measured step time within a TPOT target of what it would be without speculation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["KV_HEADROOM", "StepCurve", "TpotGovernor", "kv_room", "spare_concurrency"]

KV_HEADROOM = 0.7  # share of the KV pool speculation may bring into use


class StepCurve(Protocol):
    """A step's time by batch and summed context: a simulated `Profile`, or one measured on a
    real engine (`measured.MeasuredProfile`)."""

    def decode_step_s(self, batch: int, context_tokens: float) -> float: ...

    def mixed_step_s(self, batch: int, ctx_sum: float, chunks: Sequence[tuple[float, float]]) -> float:
        """A step that decodes `batch` sequences (contexts summing to `ctx_sum`) and computes
        prompt rows beside them: `chunks` holds (new tokens, the prefix they follow) each."""
        ...


def spare_concurrency(
    profile: StepCurve, primary: int, primary_ctx: float, spec_ctx: float, slack: float, limit: int = 1024
) -> int:
    """How many sequences of `spec_ctx` context can join a decode batch of `primary` sequences
    (contexts summing to `primary_ctx`) before a step costs more than (1 + slack) × what the
    primary sequences alone cost: the roofline knee T2 budgets speculation by. Below the knee
    extra sequences ride almost free (the weights are read once per step); above it their KV
    reads, then their FLOPs, add up."""
    if primary == 0:
        base = profile.decode_step_s(1, spec_ctx)
        primary_ctx = 0.0
    else:
        base = profile.decode_step_s(primary, primary_ctx)
    budget = (1 + slack) * base
    lo, hi = 0, limit  # the step grows with n: binary-search the last n within budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if profile.decode_step_s(primary + mid, primary_ctx + mid * spec_ctx) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def kv_room(kv_capacity_tokens: int, kv_held: int, spec_jobs: int, max_step_tokens: int) -> int:
    """Speculative jobs a KV pool of `kv_capacity_tokens` allows: never so many that
    speculation would bring more than KV_HEADROOM of it into use (each job may hold up to
    `max_step_tokens`)."""
    headroom = int(KV_HEADROOM * kv_capacity_tokens) - kv_held
    return max(0, (headroom + spec_jobs * max_step_tokens) // max_step_tokens)


@dataclass
class TpotGovernor:
    """The slack of one engine, steered so primary TPOT grows by `target` (0.05: +5%).

    Every `window` decode steps with primary sequences in them, the governor compares what
    those steps took (measured) with what they would have taken without the speculative work
    in them (the engine's counterfactual, or a reference measured without speculation) and
    moves the slack by the error times a gain: an engine whose speculation costs less than
    the target gets more (`gain`), one over the target less, twice as fast (`gain_down`),
    so the windows over the target are short. It raises the slack only while the pool was
    what limited speculation (a window in which speculation never filled its pool says
    nothing about what more would cost: no wind-up).

    The slack may go below 0: a step curve that prices speculation too low (measured under
    other conditions, or blind to some of its work) still admits some at slack 0, and the
    measured growth then pushes the slack under it, where nothing is admitted beside
    primaries, until windows under the target raise it again — the curve decides what is
    admitted first, the measured steps how much in all."""

    target: float = 0.05
    slack: float = 0.10  # where it starts
    gain: float = 0.5  # raising the slack
    gain_down: float = 1.0  # lowering it: over the target is corrected faster than under
    window: int = 32
    max_slack: float = 4.0
    min_slack: float = -0.05  # below 0 no room at all; deeper would only keep it shut longer
    _measured_s: float = 0.0
    _alone_s: float = 0.0
    _steps: int = 0
    _limited: bool = False
    _fed: tuple[int, float, float] = (0, 0, 0)  # the engine's counters at the last `feed`
    windows: int = 0  # windows closed so far
    last_growth: float | None = None  # the measured TPOT growth of the last closed window

    def observe(self, steps: int, measured_s: float, alone_s: float, limited: bool) -> None:
        """`steps` more primary decode steps took `measured_s` (`alone_s` without speculation);
        `limited`: at some point meanwhile speculation could have used more than its pool,
        and the slack (not the KV pool) was what set the pool."""
        self._steps += steps
        self._measured_s += measured_s
        self._alone_s += alone_s
        self._limited |= limited
        if self._steps < self.window or self._alone_s <= 0:
            return
        self.last_growth = self._measured_s / self._alone_s - 1.0
        self.windows += 1
        error = self.target - self.last_growth
        if error < 0 or self._limited:
            gain = self.gain if error > 0 else self.gain_down
            self.slack = min(self.max_slack, max(self.min_slack, self.slack + gain * error))
        self._steps, self._measured_s, self._alone_s, self._limited = 0, 0.0, 0.0, False

    def feed(self, steps: int, measured_s: float, alone_s: float) -> None:
        """The engine's cumulative counters (`EngineStats.primary_*`): what they gained since
        the last feed is observed. Counters that went down (a restarted engine) count from
        zero; a non-finite reading is skipped."""
        last = self._fed if steps >= self._fed[0] else (0, 0.0, 0.0)
        self._fed = (steps, measured_s, alone_s)
        d_steps, d_measured, d_alone = steps - last[0], measured_s - last[1], alone_s - last[2]
        if d_steps > 0 and d_alone > 0 and math.isfinite(d_measured) and math.isfinite(d_alone):
            self.observe(d_steps, d_measured, d_alone, limited=False)

    def note_pool(self, demand: int, pool: int, set_by_slack: bool) -> None:
        """A pool of `pool` speculative jobs met `demand` branches; `set_by_slack`: the slack,
        not the KV room, set it. If speculation could have used more, the window counts as
        limited (the slack may rise)."""
        self._limited |= demand > 0 and demand >= pool and set_by_slack

    @property
    def inflation(self) -> float | None:
        """The measured TPOT growth of the window in progress (None before a step)."""
        return self._measured_s / self._alone_s - 1.0 if self._alone_s > 0 else None
