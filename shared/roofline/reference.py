"""What a step would take without speculation, learned from the steps that had none.

The TPOT governor (`capacity.TpotGovernor`) holds the primaries' measured step against the
same step with the speculative work left out. A simulated engine knows that counterfactual
exactly; a real one can only estimate it. Scaled by a step curve measured at start-up, the
estimate inherits the curve's errors — a curve measured under other conditions (threads,
kernels, a quieter machine), or one that prices some of the work wrongly (the prompt rows a
speculative job brings) — and a wrong counterfactual lets speculation hold TPOT over the
target for as long as the run lasts.

`CleanSteps` closes that loop on measurements: an online least-squares fit of the time of the
steps the engine ran with no speculative work in them, on what the step held (features such
as decode rows, prompt rows, context), with the curve's own coefficients θ₀ as the prior.
Every clean step moves the fit toward this engine as it runs now; the prior, worth a
twentieth of a step for each coefficient, only fills what the clean steps have not shown (a
feature they never varied). Old steps fade (`forget`), so the fit follows a machine that gets busier or
quieter.

    θ = argmin Σ_i λ^(n-i) (t_i − θ·x_i)²  +  w Σ_j s_j² (θ_j − θ₀_j)²
          clean steps, newest weighed most      the prior; s_j: feature j's typical size

θ₀ is the least-squares fit of the curve over a grid of steps (`curve_points`), and s_j the
root mean square of feature j over that grid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["CleanSteps", "curve_points"]


class CleanSteps:
    """A linear fit of a clean step's time on `features(...)` of what it held.

    `prior(points)` seeds it with (features, seconds) pairs from the step curve, each
    coefficient's prior weighing `prior_weight` clean steps; `observe` adds a clean step;
    `predict` is the fit's time for a step (None before the fit has seen `min_steps` clean
    steps: the caller then falls back to the curve)."""

    def __init__(
        self, dims: int, forget: float = 0.995, prior_weight: float = 0.05, min_steps: int = 16
    ) -> None:
        self.dims = dims
        self.forget = forget
        self.prior_weight = prior_weight
        self.min_steps = min_steps
        self.steps = 0  # clean steps observed
        self._a = np.zeros((dims, dims))  # Σ λ^age x xᵀ over clean steps
        self._b = np.zeros(dims)  # Σ λ^age x t
        self._a0 = np.eye(dims) * 1e-12  # the prior's pull (a ridge toward θ₀: none yet)
        self._b0 = np.zeros(dims)
        self._theta: np.ndarray | None = None  # solved lazily after a change

    def prior(self, points: Sequence[tuple[Sequence[float], float]]) -> None:
        """Seed the fit with the curve's (features, seconds) `points`."""
        if not points:
            return
        x = np.array([list(f) for f, _ in points], dtype=float)
        t = np.array([seconds for _, seconds in points], dtype=float)
        theta0 = np.linalg.lstsq(x, t, rcond=None)[0]
        self._a0 = np.diag(self.prior_weight * np.mean(x * x, axis=0) + 1e-12)
        self._b0 = self._a0 @ theta0
        self._theta = None

    def observe(self, x: Sequence[float], seconds: float) -> None:
        """A clean step with features `x` took `seconds`."""
        if not np.isfinite(seconds) or seconds < 0:
            return
        v = np.asarray(x, dtype=float)
        self._a = self.forget * self._a + np.outer(v, v)
        self._b = self.forget * self._b + seconds * v
        self.steps += 1
        self._theta = None

    def predict(self, x: Sequence[float]) -> float | None:
        """The fit's time for a step with features `x`, at least 0 (None: too few clean steps)."""
        if self.steps < self.min_steps:
            return None
        if self._theta is None:
            self._theta = np.linalg.lstsq(self._a + self._a0, self._b + self._b0, rcond=None)[0]
        return max(0.0, float(self._theta @ np.asarray(x, dtype=float)))

    @property
    def coefficients(self) -> list[float] | None:
        """θ (seconds per unit of each feature), once the fit is in use (None before)."""
        if self.predict([0.0] * self.dims) is None:
            return None
        assert self._theta is not None
        return [float(c) for c in self._theta]


def curve_points(
    step_s: Callable[[int, int, int], float],
    features: Callable[[int, int, int], Sequence[float]],
    decode_rows: Sequence[int] = (1, 2, 4, 8, 16),
    prompt_rows: Sequence[int] = (0, 32, 128),
    contexts: Sequence[int] = (128, 512),
) -> list[tuple[Sequence[float], float]]:
    """The prior's points: `step_s(decode rows, prompt rows, context per row)` over a grid,
    each with its `features`."""
    return [(features(d, p, c), step_s(d, p, c)) for d in decode_rows for p in prompt_rows for c in contexts]
