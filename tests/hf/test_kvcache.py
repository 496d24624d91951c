"""The hf engine's prefix cache: what eviction could free is kept exactly as the tree's walk
gives it, through random inserts, locks, unlocks and evictions; eviction goes oldest leaf
first, never drops a referenced entry or one above it, and releases the KV of each entry it
drops exactly once."""

import random

from spex.shared.hf.kvcache import PrefixCache


class KV:
    """Stands in for an entry's KV: counts its releases."""

    def __init__(self):
        self.released = 0

    def release(self):
        self.released += 1


def walked(cache):
    """Evictable tokens by walking the tree (the definition)."""

    def free(e):
        below = [free(c) for c in e.children.values()]
        tokens = sum(t for _, t in below)
        if e.refs == 0 and all(ok for ok, _ in below):
            return True, tokens + e.tokens
        return False, tokens

    return sum(free(e)[1] for e in cache._roots.values())


def test_evictable_tokens_stay_what_the_walk_says():
    rng = random.Random(0)
    cache, live, locked = PrefixCache(), [], []
    for step in range(3000):
        op = rng.random()
        if op < 0.4 or not live:
            parent = rng.choice([None, *live]) if live else None
            entry = cache.insert(parent, (step,) * rng.randint(1, 5), KV(), None)
            live.append(entry)
        elif op < 0.6:
            path, e = [], rng.choice(live)
            while e is not None:
                path.append(e)
                e = e.parent
            cache.lock(path[::-1])
            locked.append(path[::-1])
        elif op < 0.8 and locked:
            cache.unlock(locked.pop(rng.randrange(len(locked))))
        else:
            before = cache.total_tokens
            freed = cache.evict(rng.randint(1, 20))
            assert cache.total_tokens == before - freed
            kept = {id(e) for e in cache._all()}
            assert all(id(e) in kept for path in locked for e in path)  # never a referenced one
            assert all(e.kv.released == (id(e) not in kept) for e in live)  # the dropped ones, once
            live = [e for e in live if id(e) in kept]
        assert cache.evictable_tokens == walked(cache), step


def test_the_least_recently_used_leaf_goes_first_then_its_parent_once_a_leaf():
    cache = PrefixCache()
    root = cache.insert(None, (1, 2), KV(), None)
    old = cache.insert(root, (3,), KV(), None)
    new = cache.insert(root, (4, 5), KV(), None)
    cache.lookup(root, (4, 5))  # used last
    assert cache.evict(1) == 1 and (3,) not in root.children
    assert cache.evict(3) == 4 and cache.total_tokens == 0 and new.ids == (4, 5) and old.ids == (3,)


def test_dropping_a_piece_takes_its_children_once():
    cache = PrefixCache()
    parent = cache.insert(None, (1, 2, 3), KV(), None)
    child = cache.insert(parent, (4, 5), KV(), None)
    assert cache.drop(parent) == 5 and cache.total_tokens == 0 and cache.evictable_tokens == 0
    assert cache.drop(child) == 0  # gone with its parent: not counted or released again
    assert (parent.kv.released, child.kv.released) == (1, 1)
    assert cache.total_tokens == 0 and cache.evictable_tokens == 0
