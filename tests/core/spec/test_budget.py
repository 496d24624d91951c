"""T2 allocation: sums, caps, floor, temperature limits, and the roofline pool."""

import random

import pytest

from spex.shared.core.spec.budget import Demand, allocate, even_split, hit_rate_estimate, utility
from spex.shared.roofline.capacity import spare_concurrency
from spex.shared.roofline.hardware import parse_profile

W = 13.5e9  # Llemma-7B weight bytes


def demands(rng, n):
    return [
        Demand(f"q{i}", rng.randint(0, 12), rng.random(), rng.choice([0.0, 1e8, 2e9, 2e10])) for i in range(n)
    ]


@pytest.mark.parametrize("trial", range(200))
def test_shares_respect_caps_and_sum_to_what_can_be_used(trial):
    rng = random.Random(trial)
    ds = demands(rng, rng.randint(1, 12))
    pool = rng.randint(0, 60)
    shares = allocate(ds, pool, W, temperature=rng.choice([0.05, 0.5, 5.0]))
    assert set(shares) == {d.query_id for d in ds}
    assert all(0 <= shares[d.query_id] <= d.candidates for d in ds)
    assert sum(shares.values()) == min(pool, sum(d.candidates for d in ds))


@pytest.mark.parametrize("trial", range(100))
def test_floor_no_active_query_starves_while_the_pool_allows(trial):
    rng = random.Random(500 + trial)
    ds = demands(rng, rng.randint(1, 10))
    active = [d for d in ds if d.candidates > 0]
    pool = rng.randint(len(active), len(active) + 30)
    shares = allocate(ds, pool, W, temperature=0.01)  # even a very sharp softmax
    assert all(shares[d.query_id] >= 1 for d in active)


def test_short_pool_gives_the_floor_to_the_best_queries():
    ds = [Demand("a", 5, 0.9, 0.0), Demand("b", 5, 0.1, 0.0), Demand("c", 5, 0.5, 0.0)]
    assert allocate(ds, 2, W) == {"a": 1, "b": 0, "c": 1}


def test_high_temperature_splits_evenly_and_low_temperature_favours_utility():
    ds = [Demand("a", 20, 0.9, 0.0), Demand("b", 20, 0.3, 0.0), Demand("c", 20, 0.6, 0.0)]
    assert allocate(ds, 12, W, temperature=1e6) == {"a": 4, "b": 4, "c": 4}
    sharp = allocate(ds, 12, W, temperature=1e-3)
    assert sharp == {"a": 10, "b": 1, "c": 1}  # the floor for b and c, everything else to a


def test_what_a_cap_leaves_is_redistributed():
    ds = [Demand("a", 1, 0.99, 0.0), Demand("b", 30, 0.2, 0.0)]
    assert allocate(ds, 10, W, temperature=1e-3) == {"a": 1, "b": 9}


def test_shared_prefix_kv_raises_utility():
    base = Demand("a", 4, 0.5, 0.0)
    shared = Demand("b", 4, 0.5, W)  # reuses as many KV bytes as the weights
    assert utility(shared, W) == pytest.approx(2 * utility(base, W))
    assert allocate([base, shared], 6, W, temperature=0.25)["b"] > 3


def test_bad_temperature_and_empty_inputs():
    with pytest.raises(ValueError):
        allocate([Demand("a", 1, 0.5, 0.0)], 4, W, temperature=0)
    assert allocate([], 5, W) == {}
    assert allocate([Demand("a", 0, 0.5, 0.0)], 5, W) == {"a": 0}


def test_even_split_caps_and_sums():
    ds = [Demand("a", 1, 0.9, 0.0), Demand("b", 5, 0.1, 0.0), Demand("c", 0, 0.5, 0.0)]
    assert even_split(ds, 4) == {"a": 1, "b": 3, "c": 0}


def test_hit_rate_estimate_has_a_prior_and_converges():
    assert hit_rate_estimate(0, 0) == 0.5
    assert hit_rate_estimate(90, 100) == pytest.approx(91 / 102)


def test_spare_concurrency_is_the_last_batch_within_the_slack():
    p = parse_profile("Llemma-7B@A6000")
    for primary in (0, 1, 4, 16):
        ctx = primary * 500.0
        n = spare_concurrency(p, primary, ctx, 500.0, 0.10)
        base = p.decode_step_s(max(primary, 1), ctx if primary else 500.0)
        assert p.decode_step_s(primary + n, ctx + n * 500) <= 1.10 * base
        assert p.decode_step_s(primary + n + 1, ctx + (n + 1) * 500) > 1.10 * base
    # Weight-bound 34B leaves far more room than KV-heavy 7B MHA at the same slack.
    big = parse_profile("Llemma-34B@A100-80GB")
    assert spare_concurrency(big, 1, 500, 500, 0.1) > spare_concurrency(p, 1, 500, 500, 0.1)
