"""What a question's search may hold in Redis while it runs: the reserve memory admission counts
for it from its submission to its answer (`services.admission`).

A search's keys grow with its tree: its tree stream, its inbox and its sent ids, about 2.2-2.8 KB
a node with synthetic content, until its answer compacts them (docs/capacity.md, "Sizing Redis").
Its nodes grow with its target, at a rate each algorithm has: measured on the simulated engine
(docs/sizing.json: ReBASE-256 2.84 MB, rStar-10 220 KB, ETS-16 128 KB; ReST-MCTS, not
measured, taken as rStar's). A model's own text makes nodes larger: `SPEX_MEMORY_PER_TARGET`
sets one figure for every algorithm instead.
"""

from __future__ import annotations

__all__ = ["BYTES_PER_TARGET", "search_bytes"]

BYTES_PER_TARGET = {"rebase": 11_500, "rstar": 23_000, "ets": 8_500, "rest": 23_000}


def search_bytes(algorithm: str, target: int, per_target: int = 0) -> int:
    """Bytes a search of `algorithm` at `target` may hold in Redis (`per_target`: the operator's
    figure a unit of target, 0: the measured one)."""
    return (per_target or BYTES_PER_TARGET.get(algorithm, max(BYTES_PER_TARGET.values()))) * target
