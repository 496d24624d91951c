"""T2 — the inter-query speculative budget.

The pool to divide comes from the engine's roofline (`spex.shared.roofline.capacity`): how
many sequences can join the primary jobs' decode batch before a step costs more than
(1 + slack) × what the primary jobs alone cost. With a static `k_total` instead, the pool is
what the primary jobs leave of it. This module only divides it, and stays pure.

The paper's Eq. 1–2 survive only as images and its released code uses one global cap, so the
score is ours (paper §4.3 names its inputs). For query q with C_q distinct speculative branches
available now, online hit rate P_q, model weight bytes S_w and reusable prefix KV bytes S_KV(q):

    u_q = P_q · (S_w + S_KV(q)) / S_w

— the expected useful work of one more branch, higher when the branch reuses more resident KV
(it skips that prefill) — and the pool is split in proportion to softmax(u_q / τ), each share
capped by C_q. Every query with C_q > 0 first gets `floor` branches (no active query starves
while the pool allows); what a cap leaves unused is redistributed by the same weights, so the
shares add up to min(pool, Σ C_q).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Demand", "allocate", "even_split", "hit_rate_estimate", "utility"]


@dataclass(frozen=True)
class Demand:
    query_id: str
    candidates: int  # C_q
    hit_rate: float  # P_q
    prefix_kv_bytes: float  # S_KV(q)


def hit_rate_estimate(adopted: int, issued: int) -> float:
    """P_q measured online: adopted / issued speculative jobs, with a Laplace prior of 1/2."""
    return (adopted + 1) / (issued + 2)


def utility(d: Demand, weight_bytes: float) -> float:
    return d.hit_rate * (weight_bytes + d.prefix_kv_bytes) / weight_bytes


def allocate(
    demands: Sequence[Demand], pool: int, weight_bytes: float, temperature: float = 0.5, floor: int = 1
) -> dict[str, int]:
    """Speculative share per query (see the module docstring)."""
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    shares = {d.query_id: 0 for d in demands}
    active = [d for d in demands if d.candidates > 0]
    if pool <= 0 or not active:
        return shares
    u = {d.query_id: utility(d, weight_bytes) for d in active}
    order = sorted(active, key=lambda d: (-u[d.query_id], d.query_id))
    left = pool
    for d in order:  # the floor, best utility first when the pool is short
        give = min(floor, d.candidates, left)
        shares[d.query_id] += give
        left -= give
    open_ = [d for d in order if shares[d.query_id] < d.candidates]
    while left > 0 and open_:
        top_open = max(u[d.query_id] for d in open_)  # re-centre: capped leaders leave no underflow
        w = {d.query_id: math.exp((u[d.query_id] - top_open) / temperature) for d in open_}
        total_w = sum(w.values())
        quota = {d.query_id: left * w[d.query_id] / total_w for d in open_}
        full = [d for d in open_ if quota[d.query_id] >= d.candidates - shares[d.query_id]]
        if full:  # capped queries take their cap; the rest is re-divided among the others
            for d in full:
                left -= d.candidates - shares[d.query_id]
                shares[d.query_id] = d.candidates
            open_ = [d for d in open_ if d not in full]
            continue
        # Largest-remainder apportionment of what is left.
        for d in open_:
            shares[d.query_id] += int(quota[d.query_id])
        rest = left - sum(int(quota[d.query_id]) for d in open_)
        by_remainder = sorted(open_, key=lambda d: (-(quota[d.query_id] % 1), order.index(d)))
        for d in by_remainder[:rest]:
            shares[d.query_id] += 1
        left = 0
    return shares


def even_split(demands: Sequence[Demand], pool: int) -> dict[str, int]:
    """Without T2: the pool split evenly among queries that can use it, capped by C_q (a
    coordinator's static local share)."""
    shares = {d.query_id: 0 for d in demands}
    active = [d for d in demands if d.candidates > 0]
    left = max(0, pool)
    while left > 0:
        open_ = [d for d in active if shares[d.query_id] < d.candidates]
        if not open_:
            break
        for d in open_[:left]:
            shares[d.query_id] += 1
            left -= 1
    return shares
