"""The speculative cache of one query, and an injected predictor replacing the algorithm's."""

from dataclasses import dataclass

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.core.ids import child_id, node_seed
from spex.shared.core.speculation import SpecCache
from spex.shared.core.tree import EXPAND, Tree


def test_a_handle_has_the_identity_of_the_future_tree_node():
    tree = Tree("q", seed=9, question_tokens=10)
    cache = SpecCache(seed=9, capacity=4)
    handle = cache.handle(tree.root, 2, EXPAND)
    assert handle is cache.handle(tree.root, 2, EXPAND)  # created once
    assert handle.id not in tree.nodes  # a handle never enters the tree
    assert handle.id == child_id(tree.root.id, 2, EXPAND) == tree.child(tree.root, 2).id
    assert handle.seed == node_seed(9, handle.id) == tree.nodes[handle.id].seed


def test_take_returns_the_handle_and_its_distance_once():
    root = Tree("q", seed=0, question_tokens=1).root
    cache = SpecCache(seed=0, capacity=4)
    h = cache.handle(root, 0, EXPAND)
    h.generated = True
    cache.finished(h.id, distance=3)
    assert cache.take(h.id) == (h, 3)
    assert cache.take(h.id) == (None, 0)


def test_prune_forgets_unissued_predictions_and_reports_dead_handles_in_order():
    root = Tree("q", seed=0, question_tokens=1).root
    cache = SpecCache(seed=0, capacity=4)
    never, running, dead_done, dead_running = (cache.handle(root, i, EXPAND) for i in range(4))
    dead_done.generated = True
    in_flight = {running.id, dead_running.id}
    dead = cache.prune(lambda nid: nid in in_flight, lambda n: n not in (dead_done, dead_running))
    assert dead == [dead_done.id, dead_running.id]  # the caller cancels their jobs
    assert [n.id for n in cache] == [running.id]  # the unissued one is forgotten too


def test_evict_drops_the_oldest_generated_handles_past_capacity():
    root = Tree("q", seed=0, question_tokens=1).root
    cache = SpecCache(seed=0, capacity=2)
    handles = [cache.handle(root, i, EXPAND) for i in range(4)]
    for h in handles:
        h.generated = True
    assert cache.evict() == 2
    assert [n.id for n in cache] == [h.id for h in handles[2:]]


@dataclass
class Nothing:
    """A predictor that never predicts (the algorithm's distance is never asked for)."""

    algorithm: object

    def predict(self, view, k):
        return []

    def spec_alive(self, node):
        return True

    def spec_distance(self, node):
        raise AssertionError("no prediction, no distance")


def test_an_injected_predictor_replaces_the_algorithms_hooks():
    cfg = BenchConfig(algorithm="rstar", target=5, questions=3, mode="spex")
    own = summarize(run_bench(cfg))
    none = summarize(run_bench(cfg, predictor=Nothing))
    assert own.spec_issued > 0 and none.spec_issued == 0
    assert none.trees_digest == own.trees_digest  # speculation never changes the search
