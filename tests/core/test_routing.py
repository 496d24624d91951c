"""Prefix-affinity routing (`spex.shared.core.routing`): the hash ring moves few queries when
workers come and go, a query stays on its worker, loads stay bounded, a saturated worker
spills; and in virtual time several workers give the single worker's trees, with affinity
keeping the prefix cache's hit rate."""

from dataclasses import replace

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.core.routing import SHARED, Load, Ring, route

QUERIES = [f"q{i}" for i in range(2000)]


def test_owners_are_stable_and_a_worker_leaving_moves_only_its_queries():
    ring = Ring(["a", "b", "c", "d"])
    before = {q: ring.owner(q) for q in QUERIES}
    assert Ring(["d", "c", "b", "a"]).owner("q7") == before["q7"]  # order of workers is irrelevant
    share = {w: sum(o == w for o in before.values()) / len(QUERIES) for w in "abcd"}
    assert all(0.15 < s < 0.35 for s in share.values()), share
    assert ring.update(["a", "b", "c"]) and not ring.update(["c", "b", "a"])
    after = {q: ring.owner(q) for q in QUERIES}
    moved = {q for q in QUERIES if before[q] != after[q]}
    assert moved == {q for q in QUERIES if before[q] == "d"}  # only d's queries move
    ring.update(["a", "b", "c", "d", "e"])
    joined = {q for q in QUERIES if ring.owner(q) != before[q]}
    assert all(ring.owner(q) == "e" for q in joined) and 0.1 < len(joined) / len(QUERIES) < 0.3


def test_walk_visits_every_worker_once_owner_first():
    ring = Ring(["a", "b", "c"])
    for q in QUERIES[:50]:
        order = list(ring.walk(q))
        assert sorted(order) == ["a", "b", "c"] and order[0] == ring.owner(q)
    assert Ring().owner("q") is None and route("q", Ring(), {}) == SHARED


def test_a_query_stays_where_it_was_placed_while_that_worker_has_room():
    ring = Ring(["a", "b"])
    loads = {"a": Load(jobs=10, slots=64, queries=9), "b": Load(jobs=0, slots=64, queries=0)}
    assert route("q1", ring, loads, current="a") == "a"  # sticky, even though a is the busier
    full = {"a": Load(64, 64, 9), "b": Load(0, 64, 0)}
    assert route("q1", ring, full, current="a") == "b"  # saturated: spills to the one with room
    assert route("q1", ring, {"a": Load(64, 64), "b": Load(64, 64)}) == SHARED  # nobody has room


def test_new_queries_skip_a_worker_over_the_load_bound():
    ring = Ring(["a", "b", "c", "d"])
    owned_by_a = next(q for q in QUERIES if ring.owner(q) == "a")
    light = {w: Load(0, 0, 1) for w in "abcd"}
    assert route(owned_by_a, ring, light) == "a"
    heavy = light | {"a": Load(0, 0, 4)}  # mean (4+1+1+1+1)/4 = 2, cap ceil(1.25 × 2) = 3
    assert route(owned_by_a, ring, heavy) == next(w for w in ring.walk(owned_by_a) if w != "a")


def test_without_affinity_the_least_loaded_worker_takes_each_job():
    ring = Ring(["a", "b", "c"])
    loads = {"a": Load(5, 0), "b": Load(2, 0), "c": Load(2, 0)}
    assert {route(q, ring, loads, affinity=False) for q in QUERIES[:20]} == {"b"}  # ties by name


def test_four_workers_give_one_workers_trees_and_affinity_keeps_the_cache_hitting():
    cfg = BenchConfig(algorithm="rebase", target=8, batch_size=8, questions=12, mode="spex")
    one = summarize(run_bench(cfg))
    on = summarize(run_bench(replace(cfg, workers=4, affinity=True)))
    off = summarize(run_bench(replace(cfg, workers=4, affinity=False)))
    assert one.trees_digest == on.trees_digest == off.trees_digest  # routing never changes a search
    assert on.prefix_cache_hit_rate > off.prefix_cache_hit_rate + 0.05
    assert on.prefix_cache_hit_rate >= one.prefix_cache_hit_rate - 0.02
