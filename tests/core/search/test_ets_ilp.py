"""ETS's integer program against exhaustive enumeration on small trees."""

import itertools
import random

import pytest

from spex.shared.core.search.embed import trigram_embedder
from spex.shared.core.search.ets import cluster_labels, solve_ets_ilp


def random_tree(rng, n_leaves):
    """Candidates under a random ancestor forest rooted at one root: returns, per
    ancestor, the set of candidate indices below it."""
    parents = {}  # node -> parent; ancestors are ints, candidates are ('c', i)
    next_id = 1
    inner = [0]
    for _ in range(rng.randint(0, 4)):
        parents[next_id] = rng.choice(inner)
        inner.append(next_id)
        next_id += 1
    under = {a: set() for a in inner}
    for i in range(n_leaves):
        a = rng.choice(inner)
        while a is not None:
            under[a].add(i)
            a = parents.get(a)
    return [s for s in under.values() if s]


def brute_force(weights, ancestors, clusters, lc, ls):
    n, m = len(weights), len(ancestors)
    cost = 1.0 / (n + m)
    best = -float("inf")
    for keep in itertools.product([0, 1], repeat=n):
        if not any(keep):
            continue
        value = sum(w * x for w, x in zip(weights, keep))
        value -= lc * cost * sum(keep)
        value -= lc * cost * sum(1 for d in ancestors if any(keep[i] for i in d))
        if clusters is not None:
            k = max(clusters) + 1
            value += ls / k * len({c for c, x in zip(clusters, keep) if x})
        best = max(best, value)
    return best


@pytest.mark.parametrize("trial", range(60))
def test_ilp_optimum_equals_exhaustive_enumeration(trial):
    rng = random.Random(1000 + trial)
    n = rng.randint(1, 7)
    ancestors = random_tree(rng, n)
    raw = [rng.randint(0, 5) for _ in range(n)]
    total = sum(raw) or 1
    weights = [r / total for r in raw]
    clusters = None
    if rng.random() < 0.7:
        labels = [rng.randint(0, 2) for _ in range(n)]
        remap = {lab: i for i, lab in enumerate(dict.fromkeys(labels))}
        clusters = [remap[lab] for lab in labels]
    lc, ls = rng.choice([0.0, 1.0, 2.0]), rng.choice([0.0, 1.5])
    keep = solve_ets_ilp(weights, ancestors, clusters, lc, ls)
    assert any(keep)
    cost = 1.0 / (n + len(ancestors))
    got = sum(w for w, x in zip(weights, keep) if x) - lc * cost * sum(keep)
    got -= lc * cost * sum(1 for d in ancestors if any(keep[i] for i in d))
    if clusters is not None:
        got += ls / (max(clusters) + 1) * len({c for c, x in zip(clusters, keep) if x})
    assert got == pytest.approx(brute_force(weights, ancestors, clusters, lc, ls), abs=1e-7)


def test_identical_texts_share_a_cluster_and_different_ones_do_not():
    texts = ["Step 1: apply approach 2.", "Step 1: apply approach 2.", "Completely unrelated words here"]
    labels = cluster_labels(texts, 0.05, trigram_embedder)
    assert labels[0] == labels[1] != labels[2]
