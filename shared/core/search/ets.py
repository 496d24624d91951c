"""ETS: efficient tree search (Hooper et al. 2025; `SqueezeAILab/ETS:rebase.py#L373-569`).

At each depth, over the N non-finished candidates and their M ancestors (root included):

1. outcome weights O_i = n_i / Σ n from REBASE's ceil-softmax allocation (T = 0.2);
2. semantic clusters of the candidates' last-step texts (average-linkage, cosine distance,
   cut at 0.05), when λs > 0, N > 1 and the texts are not all equal;
3. the integer program (PuLP/CBC in the reference; scipy's HiGHS `milp` here), with binary
   x_i (keep candidate i), y_j (ancestor j is paid for), c_k (cluster k is covered) and
   C = 1 / (M + N)::

       maximize   Σ_i O_i x_i − λc·C·Σ_j y_j − λc·C·Σ_i x_i + (λs/K)·Σ_k c_k
       subject to y_j ≤ Σ_{i∈desc(j)} x_i,   y_j ≥ x_i ∀ i∈desc(j),
                  Σ_{i∈cluster k} x_i ≥ c_k, Σ_i x_i ≥ 1

4. REBASE's ceil-softmax again, over the kept candidates only, with the full remaining width.

Defaults are what the SPEX artifact runs ETS with (`--ets`: λc = 2, λs = 0, so no clustering);
ETS's own per-width settings are presets by name (`ETS_PRESETS`, `spex bench --preset
ets-16`): λc = 1 and λs = 1.5, 1.4, 1.45 for N = 16, 64, 256
(`hype-parameters/ets_{16,64,256}_math500.yaml`).

Deliberate difference: the reference turns λc = 0 into a cost of +1e-4 (a sign slip); here
λc = 0 means no cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spex.shared.core.search.base import ParamValue, SearchConfig, apply_params, register
from spex.shared.core.search.embed import Embedder, trigram_embedder
from spex.shared.core.search.rebase import LevelSearch, RebaseParams, ceil_softmax_widths
from spex.shared.core.tree import Node, Tree

__all__ = ["ETS_PRESETS", "Ets", "EtsParams", "cluster_labels", "ets_objective", "solve_ets_ilp"]


@dataclass(frozen=True)
class EtsParams(RebaseParams):
    lambda_c: float = 2.0  # KV-cost weight (the SPEX artifact's --ets)
    lambda_s: float = 0.0  # semantic-coverage weight (artifact: 0; ETS's own: see ETS_PRESETS)
    cluster_distance: float = 0.05  # fcluster(t=0.05, criterion="distance")


def cluster_labels(texts: Sequence[str], threshold: float, embed: Embedder) -> list[int]:
    """Cluster label per text (0-based); one cluster when there is nothing to split."""
    if len(texts) < 2 or len(set(texts)) < 2:
        return [0] * len(texts)
    vectors = embed(list(texts))
    from scipy.cluster.hierarchy import fcluster, linkage  # scipy loads in ~1 s: only for ETS

    labels = fcluster(linkage(vectors, method="average", metric="cosine"), t=threshold, criterion="distance")
    return [int(x) - 1 for x in labels]


def ets_objective(
    keep: Sequence[bool],
    weights: Sequence[float],
    ancestors: Sequence[set[int]],
    clusters: Sequence[int] | None,
    lambda_c: float,
    lambda_s: float,
) -> float:
    """Objective value of a keep-vector with y and c at their best values."""
    n, m = len(weights), len(ancestors)
    cost = 1.0 / (m + n)
    value = sum(w for w, k in zip(weights, keep, strict=True) if k)
    value -= lambda_c * cost * sum(1 for k in keep if k)
    value -= lambda_c * cost * sum(1 for desc in ancestors if any(keep[i] for i in desc))
    if clusters is not None:
        n_clusters = max(clusters) + 1
        covered = {c for c, k in zip(clusters, keep, strict=True) if k}
        value += lambda_s / n_clusters * len(covered)
    return value


def solve_ets_ilp(
    weights: Sequence[float],
    ancestors: Sequence[set[int]],
    clusters: Sequence[int] | None,
    lambda_c: float,
    lambda_s: float,
) -> list[bool]:
    """Solve the ETS integer program; `ancestors[j]` = indices of candidates under j."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # scipy loads in ~1 s: only for ETS

    n, m = len(weights), len(ancestors)
    k = (max(clusters) + 1) if clusters is not None else 0
    cost = 1.0 / (m + n)
    nv = n + m + k  # variables: x[0:n], y[n:n+m], c[n+m:]
    c = np.zeros(nv)  # milp minimizes: negate the objective
    c[:n] = -(np.asarray(weights, dtype=float) - lambda_c * cost)
    c[n : n + m] = lambda_c * cost
    if k:
        c[n + m :] = -lambda_s / k
    rows: list[np.ndarray] = []
    lo: list[float] = []
    hi: list[float] = []

    def row() -> np.ndarray:
        return np.zeros(nv)

    def add(r: np.ndarray, low: float, high: float) -> None:
        rows.append(r)
        lo.append(low)
        hi.append(high)

    for j, desc in enumerate(ancestors):
        r = row()  # y_j - Σ x_i <= 0
        r[n + j] = 1.0
        for i in desc:
            r[i] = -1.0
        add(r, -np.inf, 0.0)
        for i in desc:  # x_i - y_j <= 0
            r = row()
            r[i], r[n + j] = 1.0, -1.0
            add(r, -np.inf, 0.0)
    if clusters is not None:
        for kk in range(k):  # c_k - Σ_{i in k} x_i <= 0
            r = row()
            r[n + m + kk] = 1.0
            for i, lab in enumerate(clusters):
                if lab == kk:
                    r[i] = -1.0
            add(r, -np.inf, 0.0)
    r = row()  # Σ x_i >= 1
    r[:n] = 1.0
    add(r, 1.0, np.inf)
    res = milp(
        c,
        constraints=LinearConstraint(np.array(rows), lo, hi),
        integrality=np.ones(nv),
        bounds=Bounds(0, 1),
    )
    if res.x is None:  # cannot happen for a feasible program; keep every candidate
        return [True] * n
    return [bool(v > 0.5) for v in res.x[:n]]


ETS_PRESETS: dict[str, dict[str, ParamValue]] = {
    "artifact": {"lambda_c": 2.0, "lambda_s": 0.0},
    "ets-16": {"lambda_c": 1.0, "lambda_s": 1.5},
    "ets-64": {"lambda_c": 1.0, "lambda_s": 1.4},
    "ets-256": {"lambda_c": 1.0, "lambda_s": 1.45},
}


@register
class Ets(LevelSearch):
    name = "ets"
    parameters = EtsParams
    presets = ETS_PRESETS

    def __init__(self, tree: Tree, config: SearchConfig, embed: Embedder = trigram_embedder) -> None:
        super().__init__(tree, config)
        self.embed = embed
        self._memo: dict[tuple[tuple[str, ...], int], list[int]] = {}  # speculation asks often

    def widths(self, candidates: list[Node], remaining: int) -> list[int]:
        key = (tuple(n.id for n in candidates), remaining)
        if key not in self._memo:
            self._memo[key] = self._solve(candidates, remaining)
        return list(self._memo[key])

    def make_params(self, config: SearchConfig) -> EtsParams:  # type: ignore[override]
        return apply_params(EtsParams(), config.params)  # type: ignore[return-value]

    def _solve(self, candidates: list[Node], remaining: int) -> list[int]:
        p: EtsParams = self.params  # type: ignore[assignment]
        rewards = [n.reward or 0.0 for n in candidates]
        alloc = ceil_softmax_widths(rewards, remaining, p.softmax_temperature)
        if len(candidates) < 2:
            return alloc
        total = sum(alloc)
        weights = [a / total for a in alloc]
        index = {n.id: i for i, n in enumerate(candidates)}
        under: dict[str, set[int]] = {}
        for node in candidates:
            anc = node.parent
            while anc is not None:
                under.setdefault(anc.id, set()).add(index[node.id])
                anc = anc.parent
        ancestors = [under[a] for a in sorted(under)]
        texts = [n.text for n in candidates]
        clusters = None
        if p.lambda_s > 0 and len(set(texts)) > 1:
            clusters = cluster_labels(texts, p.cluster_distance, self.embed)
        keep = solve_ets_ilp(weights, ancestors, clusters, p.lambda_c, p.lambda_s)
        kept_rewards = [r if k else -np.inf for r, k in zip(rewards, keep, strict=True)]
        kept = [i for i, k in enumerate(keep) if k]
        sub = ceil_softmax_widths([kept_rewards[i] for i in kept], remaining, p.softmax_temperature)
        out = [0] * len(candidates)
        for i, w in zip(kept, sub, strict=True):
            out[i] = w
        return out
