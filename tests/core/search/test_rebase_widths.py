"""REBASE widths against a brute-force re-derivation of the sequential-ceil rule."""

import math
import random
from fractions import Fraction

import pytest

from spex.shared.core.search.rebase import ceil_softmax_widths


def brute_force_widths(rewards, width, temperature):
    """Independent reference: walk candidates by descending reward and give each the
    smallest k with k ≥ W·e/S (found by counting up), with W and S updated after each."""
    e = [Fraction(math.exp((r - max(rewards)) / temperature)) for r in rewards]
    order = sorted(range(len(rewards)), key=lambda i: (-rewards[i], i))
    w, s, out = Fraction(width), sum(e), [0] * len(rewards)
    for i in order:
        if w <= 0:
            break
        k = 0
        while k * s < w * e[i]:
            k += 1
        out[i] = k
        w -= k
        s -= e[i]
    return out


@pytest.mark.parametrize("trial", range(300))
def test_widths_match_brute_force_and_sum_to_the_budget(trial):
    rng = random.Random(trial)
    n = rng.randint(1, 24)
    rewards = [round(rng.random(), rng.choice([1, 2, 6])) for _ in range(n)]  # ties included
    width = rng.randint(0, 64)
    temperature = rng.choice([0.05, 0.2, 1.0])
    got = ceil_softmax_widths(rewards, width, temperature)
    assert got == brute_force_widths(rewards, width, temperature)
    assert sum(got) == width


def test_low_temperature_concentrates_on_the_best():
    # e = exp(r / 0.2): 90.0, 1.65, 12.2 -> k = ceil(16·90/103.8) = 14, then ceil(2·12.2/13.8) = 2.
    assert ceil_softmax_widths([0.9, 0.1, 0.5], 16, 0.2) == [14, 0, 2]


def test_equal_rewards_split_evenly():
    assert ceil_softmax_widths([0.5] * 4, 16, 0.2) == [4, 4, 4, 4]
    assert ceil_softmax_widths([0.5] * 3, 4, 0.2) == [2, 1, 1]


@pytest.mark.parametrize("trial", range(100))
def test_widths_match_brute_force_at_extreme_spreads(trial):
    """Rewards far apart at a low temperature: exponentials down to subnormals and zero."""
    rng = random.Random(10_000 + trial)
    n = rng.randint(2, 16)
    rewards = [rng.choice([0.0, 1.0, rng.random(), -rng.random() * 50]) for _ in range(n)]
    width = rng.randint(1, 256)
    temperature = rng.choice([0.001, 0.01, 0.05])
    got = ceil_softmax_widths(rewards, width, temperature)
    assert got == brute_force_widths(rewards, width, temperature)
    assert sum(got) == width
