"""Spare capacity: how many speculative sequences an engine can take beside its primary ones.

Both the real runtime (the budget allocator, from live generator load) and the simulator
(per-step pausing, the virtual-time pool) budget speculation with these two functions.
"""

from __future__ import annotations

from spex.shared.roofline.hardware import Profile

__all__ = ["KV_HEADROOM", "spare_concurrency", "speculative_pool"]

KV_HEADROOM = 0.7  # share of the KV pool speculation may bring into use


def spare_concurrency(
    profile: Profile, primary: int, primary_ctx: float, spec_ctx: float, slack: float, limit: int = 1024
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


def speculative_pool(
    profile: Profile,
    primary: int,
    primary_ctx: float,
    spec_ctx: float,
    slack: float,
    kv_held: int,
    spec_jobs: int,
    max_step_tokens: int,
) -> int:
    """Speculative jobs one generator can take now: what the roofline leaves beside its primary
    jobs (`spare_concurrency`), and never so many that speculation would bring more than
    KV_HEADROOM of its KV pool into use (each job may hold up to `max_step_tokens`)."""
    pool = spare_concurrency(profile, primary, primary_ctx, spec_ctx, slack)
    headroom = int(KV_HEADROOM * profile.kv_capacity_tokens) - kv_held
    return min(pool, max(0, (headroom + spec_jobs * max_step_tokens) // max_step_tokens))
