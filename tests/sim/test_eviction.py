"""Under KV pressure, unreferenced cache entries are evicted least recently used first."""

from spex.shared.sim.radix import RadixCache
from tests.sim.conftest import req, run_all


def test_lru_leaf_goes_first():
    cache = RadixCache()
    cache.insert([("q", 10), ("a", 5)], now_s=1.0)
    cache.insert([("q", 10), ("b", 5)], now_s=2.0)
    cache.match([("q", 10), ("a", 5)], now_s=3.0)  # touch a: b is now the oldest leaf
    assert cache.evict(5) == 5
    assert cache.match([("q", 10), ("b", 5)], 4.0)[0] == 10
    assert cache.match([("q", 10), ("a", 5)], 4.0)[0] == 15


def test_locked_entries_are_never_evicted():
    cache = RadixCache()
    path = cache.insert([("q", 10), ("a", 5)], now_s=1.0)
    cache.lock(path)
    assert cache.evictable_tokens == 0
    assert cache.evict(100) == 0
    cache.unlock(path, now_s=2.0)
    assert cache.evict(100) == 15 and cache.total_tokens == 0


def test_engine_evicts_old_prefixes_to_admit_new_work(engine_factory):
    engine = engine_factory()
    capacity = engine.capacity_tokens
    size = capacity // 4
    for i in range(6):  # 1.5 pools' worth of distinct prompts, one after another
        engine.submit(req(f"r{i}", [(f"q{i}", size)], 2), engine.clock_s)
        run_all(engine)
        assert engine.used_tokens <= capacity
    assert engine.stats.evicted_tokens > 0
    # The oldest prompt was evicted, the newest is still cached.
    assert engine.cache.match([("q0", size)], engine.clock_s)[0] == 0
    assert engine.cache.match([("q5", size)], engine.clock_s)[0] == size


def test_kv_limits_admission(engine_factory):
    engine = engine_factory(new_token_ratio=0.0)
    half = engine.capacity_tokens // 2 + 10
    engine.submit(req("a", [("qa", half)], 50), 0.0)
    engine.submit(req("b", [("qb", half)], 50), 0.0)
    done = run_all(engine)
    a, b = sorted(done, key=lambda c: c.rid)
    assert b.first_token_s >= a.time_s  # b waited for a's KV to become evictable
    assert engine.stats.peak_kv_tokens <= engine.capacity_tokens


def test_decode_out_of_kv_retracts_and_everything_still_finishes(engine_factory):
    # Llemma-34B on an A100-80GB holds only ~14.7k KV tokens: four 3k-token prompts that each
    # grow by 1.5k tokens cannot all stay resident, so the engine retracts (SGLang's retraction)
    # and resumes them later from the prefix cache.
    engine = engine_factory("Llemma-34B@A100-80GB", new_token_ratio=0.0)
    for i in range(4):
        engine.submit(req(f"r{i}", [(f"q{i}", 3000)], 1500), 0.0)
    done = run_all(engine)
    assert sorted(c.rid for c in done) == ["r0", "r1", "r2", "r3"]
    assert all(c.generated == 1500 and c.reason == "finished" for c in done)
    assert engine.stats.retractions > 0
    assert engine.stats.peak_kv_tokens <= engine.capacity_tokens


def _leaves(cache):
    out, stack = [], list(cache.root.children.values())
    while stack:
        n = stack.pop()
        if n.children:
            stack.extend(n.children.values())
        elif n.ref == 0:
            out.append(n)
    return out


def test_eviction_order_is_a_full_scans_lru_under_random_operations():
    # The heap is kept as entries change; the order it evicts in must be exactly what a scan
    # of every unlocked leaf, oldest access first (ties: created first), would choose.
    import random

    rng = random.Random(7)
    cache, locked, t = RadixCache(), [], 0.0
    prompts = [
        [("q", 10), (f"a{i}", 3), (f"b{i}.{j}", 2)][: rng.randint(1, 3)] for i in range(8) for j in range(3)
    ]
    evicted = 0
    for _ in range(3000):
        t += rng.choice([0.0, 0.5])  # equal times: ties are common
        op = rng.random()
        prompt = rng.choice(prompts)
        if op < 0.35:
            cache.insert(prompt, t)
        elif op < 0.55:
            cache.match(prompt, t)
        elif op < 0.7:
            locked.append(cache.insert(prompt, t))
            cache.lock(locked[-1])
        elif op < 0.85 and locked:
            cache.unlock(locked.pop(rng.randrange(len(locked))), t)
        else:
            leaves = _leaves(cache)
            if not leaves:
                continue
            want = min(leaves, key=lambda n: (n.last_access_s, n.uid))
            total = cache.total_tokens
            assert cache.evict(1) == want.tokens
            assert want.parent is None and cache.total_tokens == total - want.tokens
            evicted += 1
    assert evicted > 100
    assert len(cache._heap) <= 4 * cache._live + 1024  # stale entries are compacted away


def test_an_eviction_that_rebuilds_the_heap_midway_still_frees_everything_asked():
    # A long chain evicted leaf by leaf pushes each parent as it becomes a leaf; the heap's
    # stale entries (one leaf touched again and again) cross the rebuild threshold midway.
    cache = RadixCache()
    chain = [(f"s{i}", 10) for i in range(200)]
    cache.insert(chain, now_s=0.0)
    cache.insert([("other", 10)], now_s=0.0)
    for t in range(1, 1200):
        cache.match([("other", 10)], now_s=float(t))
    assert cache.evict(10**9) == 2010
    assert cache.total_tokens == 0 and not cache.root.children
