"""The counterfactual step learned from clean steps (`roofline.reference.CleanSteps`): it
follows the engine as measured, whatever its prior (the step curve) said, and the prior fills
only what the clean steps never varied."""

from __future__ import annotations

import random

import pytest

from spex.shared.roofline.reference import CleanSteps, curve_points


def truth(decode: int, prompt: int) -> float:
    return 0.010 + 0.002 * decode + 0.0015 * prompt


def features(decode: int, prompt: int, context: float = 0.0) -> list[float]:
    return [1.0, float(decode), float(prompt)]


def test_the_fit_follows_the_measured_steps_not_a_wrong_prior():
    fit = CleanSteps(dims=3, min_steps=16)
    # A curve measured on a quieter machine: every step half what this one takes.
    fit.prior(curve_points(lambda d, p, c: truth(d, p) / 2, features))
    rng = random.Random(1)
    for i in range(200):
        d, p = rng.randint(1, 12), rng.choice([0, 0, 8, 32])
        assert (fit.predict(features(d, p)) is None) == (i < 16)  # the caller's fallback until then
        fit.observe(features(d, p), truth(d, p) * rng.uniform(0.97, 1.03))
    for d, p in [(1, 0), (4, 0), (8, 32), (16, 64)]:
        assert fit.predict(features(d, p)) == pytest.approx(truth(d, p), rel=0.05)


def test_the_prior_fills_what_the_clean_steps_never_varied():
    """No clean step had prompt rows: the fit's prompt cost is the curve's, its decode cost the
    measured one."""
    fit = CleanSteps(dims=3, min_steps=4)
    fit.prior(curve_points(lambda d, p, c: 0.010 + 0.004 * d + 0.001 * p, features))
    for d in [1, 2, 3, 4, 5, 6] * 20:
        fit.observe(features(d, 0), 0.010 + 0.002 * d)
    theta = fit.coefficients
    assert theta is not None
    assert theta[1] == pytest.approx(0.002, rel=0.1)
    assert theta[2] == pytest.approx(0.001, rel=0.3)


def test_old_steps_fade_so_the_fit_follows_a_machine_that_slows_down():
    fit = CleanSteps(dims=3, forget=0.98, min_steps=4)
    for d in [1, 4, 8] * 100:
        fit.observe(features(d, 0), truth(d, 0))
    for d in [1, 4, 8] * 100:  # another process now shares the core: every step 1.5x
        fit.observe(features(d, 0), 1.5 * truth(d, 0))
    assert fit.predict(features(4, 0)) == pytest.approx(1.5 * truth(4, 0), rel=0.02)


def test_a_reading_that_is_not_a_time_is_ignored():
    fit = CleanSteps(dims=3, min_steps=1)
    fit.observe(features(1, 0), float("nan"))
    fit.observe(features(1, 0), -1.0)
    assert fit.steps == 0 and fit.predict(features(1, 0)) is None
