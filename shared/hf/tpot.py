"""The in-process engine's account of its primaries' steps, for the TPOT governor.

Each step that gives primary sequences a token is counted twice (`EngineStats.primary_*`):
as it took, and as it would have taken without the speculative work in it — its speculative
sequences' decode rows and the prompt rows their new prompts brought into the pass. That
second figure comes from `roofline.reference.CleanSteps`: a fit of the steps this engine ran
with no speculative work at all (their time on their decode rows, prompt rows and context),
the measured step curve its prior, asked for the primaries' own rows. Until the fit has seen
enough clean steps, the curve alone scales the pass from all its rows to the primaries'.

The fit's per-row costs also say where the primaries' time went: each primary step adds what
its speculative decode rows and speculative prompt rows cost (`EngineStats.primary_spec_*`),
the per-pass breakdown a benchmark reports beside the governor's growth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spex.shared.engine.api import EngineStats
from spex.shared.roofline.measured import MeasuredProfile
from spex.shared.roofline.reference import CleanSteps, curve_points

__all__ = ["PassRows", "PrimaryAccount"]

CONTEXT_UNIT = 1024  # the context feature's unit: tokens attended over, in thousands (about)


@dataclass(frozen=True)
class PassRows:
    """What one step's pass held: decode rows (one a continuing sequence) and prompt rows, each
    split into the primaries' and the speculative sequences', with the context they attend
    over (a row's position + 1, summed)."""

    primary_decode: int
    spec_decode: int
    primary_prompt: int
    spec_prompt: int
    primary_ctx: int
    ctx: int

    @property
    def clean(self) -> bool:
        return self.spec_decode == 0 and self.spec_prompt == 0

    def features(self) -> list[float]:
        return _features(
            self.primary_decode + self.spec_decode, self.primary_prompt + self.spec_prompt, self.ctx
        )

    def primary_features(self) -> list[float]:
        return _features(self.primary_decode, self.primary_prompt, self.primary_ctx)


def _features(decode: int, prompt: int, ctx: float) -> list[float]:
    return [1.0, float(decode), float(prompt), ctx / CONTEXT_UNIT]


class PrimaryAccount:
    """The primaries' steps, measured and without speculation, into an engine's stats."""

    def __init__(self) -> None:
        self.reference = CleanSteps(dims=4)
        self._curve: MeasuredProfile | None = None

    @property
    def curve(self) -> MeasuredProfile | None:
        return self._curve

    @curve.setter
    def curve(self, curve: MeasuredProfile | None) -> None:
        """The measured step curve (None: the primaries' steps are not counted, as an engine
        with no curve budgets no speculation); a new one starts a new fit with it as prior."""
        self._curve = curve
        self.reference = CleanSteps(dims=4)
        if curve is not None:
            self.reference.prior(curve_points(lambda d, p, c: _curve_step(curve, d + p, c), _grid_features))

    def step(
        self, stats: EngineStats, dt: float, pass_s: float, primaries: int, sequences: int, rows: PassRows
    ) -> None:
        """A step of `dt` seconds (its pass `pass_s`) that sampled `sequences` sequences,
        `primaries` of them primary, and ran the pass `rows`: counted into `stats`."""
        if rows.clean and (rows.primary_decode or rows.primary_prompt):
            self.reference.observe(rows.features(), dt)
        if not primaries or self._curve is None:
            return
        if rows.clean and sequences == primaries:
            alone = dt
        else:
            fitted = self.reference.predict(rows.primary_features())
            alone = fitted if fitted is not None else self._scaled(dt, pass_s, primaries, sequences, rows)
            self._attribute(stats, primaries, rows, fitted)
        stats.primary_steps += 1
        stats.primary_step_s += primaries * dt
        stats.primary_alone_s += primaries * min(alone, dt)

    def _scaled(self, dt: float, pass_s: float, primaries: int, sequences: int, rows: PassRows) -> float:
        """The curve's counterfactual: the pass scaled from all its rows to the primaries' (a
        row's context is its position), the rest of the step (sampling, admission) in
        proportion to the sequences sampled."""
        assert self._curve is not None
        alone = max(0.0, dt - pass_s) * primaries / max(1, sequences)
        mine = rows.primary_decode + rows.primary_prompt
        every = mine + rows.spec_decode + rows.spec_prompt
        if mine:
            alone += self._curve.counterfactual_s(pass_s, mine, rows.primary_ctx, every, rows.ctx)
        return alone

    def _attribute(self, stats: EngineStats, primaries: int, rows: PassRows, alone: float | None) -> None:
        """What this step's speculative rows cost its primaries by the fit (the step with them
        less the step without), split between decode and prompt rows by the fit's per-row
        costs (nothing before the fit is in use)."""
        theta, full = self.reference.coefficients, self.reference.predict(rows.features())
        if theta is None or full is None or alone is None:
            return
        decode, prompt = max(0.0, theta[1]) * rows.spec_decode, max(0.0, theta[2]) * rows.spec_prompt
        if decode + prompt <= 0:
            return
        cost = primaries * max(0.0, full - alone)
        stats.primary_spec_decode_s += cost * decode / (decode + prompt)
        stats.primary_spec_prompt_s += cost * prompt / (decode + prompt)


def _curve_step(curve: MeasuredProfile, rows: int, context: int) -> float:
    return curve.decode_step_s(rows, rows * context)


def _grid_features(decode: int, prompt: int, context: int) -> Sequence[float]:
    return _features(decode, prompt, (decode + prompt) * context)
