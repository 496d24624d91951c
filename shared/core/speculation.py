"""T1's speculative cache of one query, and the predictor that fills it.

A *speculative handle* is a node with the identity of one of the tree's future nodes, kept
outside the tree: generated ahead at low priority, then served to the search by identity if
it asks for that node (a hit), or dropped when it no longer can (a miss). Because every
result is a pure function of node identity, serving a handle gives the search exactly what
generating the node would have — the lossless promise.

What to generate ahead is the predictor's choice (`PREDICTORS`, `predictor_factory`):

- `algorithm`: the search's own hand-written hooks (`SearchAlgorithm.predict`, `.spec_alive`,
  `.spec_distance`, `.spec_likelihood`);
- `lookahead`: the search replayed ahead under guessed results (`spex.shared.core.lookahead`),
  which needs nothing from the search's author;
- `auto` (the default): the search's own hooks where it has them and they predict better
  (`LOOKAHEAD_FIRST` names the built-in searches whose hooks the look-ahead outruns), else the
  look-ahead.

A driver may inject another (the oracle bound in `spex.bench.oracle` passes one that knows the
final tree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from spex.proto.messages import SPECULATIVE
from spex.shared.core.ids import node_seed
from spex.shared.core.lookahead import LookaheadPredictor
from spex.shared.core.search.base import SearchAlgorithm, SpecView
from spex.shared.core.tree import Node

__all__ = [
    "LOOKAHEAD_FIRST",
    "MAX_SPEC_PRIORITY",
    "PREDICTORS",
    "Predictor",
    "PredictorFactory",
    "PredictorName",
    "SpecCache",
    "SpecPolicy",
    "algorithm_predictor",
    "auto_predictor",
    "has_own_hooks",
    "lookahead_predictor",
    "predictor_factory",
    "spec_priority",
]

MAX_SPEC_PRIORITY = 64  # the least likely speculative job's priority


@dataclass(frozen=True)
class SpecPolicy:
    enabled: bool = False  # T1: generate predicted nodes ahead
    cache_nodes: int = 256  # unconsumed speculative results kept per query (DFS misses)
    max_amplification: float | None = None  # stop speculating past generated/consumed tokens


class Predictor(Protocol):
    """Which nodes to generate ahead; `SearchAlgorithm` implements it for its own search."""

    def predict(self, view: SpecView, k: int) -> list[Node]:
        """Up to `k` nodes the search will likely ask for next, most likely first; each is
        neither generated nor in flight."""
        ...

    def spec_alive(self, node: Node) -> bool:
        """False once the search can no longer ask for speculative node `node`."""
        ...

    def spec_distance(self, node: Node) -> int:
        """How far ahead a prediction reaches (for hit-rate-by-distance reports)."""
        ...

    def spec_likelihood(self, node: Node) -> float:
        """The prior probability, in [0, 1], that the search asks for predicted node `node`."""
        ...


PredictorFactory = Callable[[SearchAlgorithm], Predictor]


PredictorName = Literal["auto", "algorithm", "lookahead"]
PREDICTORS: tuple[PredictorName, ...] = get_args(PredictorName)
# Built-in searches that `auto` gives the look-ahead although they have hooks of their own: on
# the simulator it outran them (docs/lookahead/README.md: rStar-10, the hit rate below but more
# candidates from further ahead, most under the throughput objective).
LOOKAHEAD_FIRST = frozenset({"rstar"})


def algorithm_predictor(algorithm: SearchAlgorithm) -> Predictor:
    """The search's own hooks predict its future (a search without them predicts nothing)."""
    return algorithm


def lookahead_predictor(algorithm: SearchAlgorithm) -> Predictor:
    """The search replayed ahead under guessed results (any search)."""
    return LookaheadPredictor(algorithm)


def has_own_hooks(algorithm: SearchAlgorithm) -> bool:
    """The search's class writes its own `predict` (the base class's predicts nothing)."""
    return type(algorithm).predict is not SearchAlgorithm.predict


def auto_predictor(algorithm: SearchAlgorithm) -> Predictor:
    """The default: the search's own hooks where it has them and they predict better, else the
    look-ahead."""
    if has_own_hooks(algorithm) and algorithm.name not in LOOKAHEAD_FIRST:
        return algorithm
    return LookaheadPredictor(algorithm)


def predictor_factory(name: str) -> PredictorFactory:
    """The factory a predictor's name stands for; an unknown name fails naming the known."""
    factories: dict[str, PredictorFactory] = {
        "auto": auto_predictor,
        "algorithm": algorithm_predictor,
        "lookahead": lookahead_predictor,
    }
    if name not in factories:
        raise ValueError(f"predictor: must be one of {', '.join(PREDICTORS)}, not {name!r}")
    return factories[name]


class SpecCache:
    """The speculative handles of one query, in the order they were created.

    A handle is created when a predictor first looks at a future node, kept while its
    generation is in flight or its result may still be asked for, and dropped when the search
    takes it (`take`), when it can no longer be asked for (`prune`), or when more than
    `capacity` generated handles wait unused (`evict`, oldest first).
    """

    def __init__(self, seed: int, capacity: int) -> None:
        self.seed = seed
        self.capacity = capacity
        self._handles: dict[str, Node] = {}
        self._distance: dict[str, int] = {}  # generated handle -> how far ahead it was predicted

    def handle(self, parent: Node, index: int, action: str) -> Node:
        """The handle of child `index` of `parent` for `action`, created on first use."""
        cid = parent.child_id(index, action)
        node = self._handles.get(cid)
        if node is None:
            node = Node(cid, parent, index, action, parent.depth + 1, node_seed(self.seed, cid))
            self._handles[cid] = node
        return node

    def keep(self, node: Node) -> None:
        """Hold handle `node` (again): a prediction made before `prune` dropped it unissued."""
        self._handles.setdefault(node.id, node)

    def get(self, node_id: str) -> Node | None:
        return self._handles.get(node_id)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._handles.values())

    def finished(self, node_id: str, distance: int) -> None:
        """The speculative generation of `node_id`, predicted `distance` ahead, is done."""
        self._distance[node_id] = distance

    def drop(self, node_id: str) -> None:
        """Forget `node_id`'s handle (its speculative work failed)."""
        self._handles.pop(node_id, None)
        self._distance.pop(node_id, None)

    def take(self, node_id: str) -> tuple[Node | None, int]:
        """The search asks for `node_id`: remove its handle; returns it (None if there is
        none) and the distance it was predicted at (0 if unknown)."""
        return self._handles.pop(node_id, None), self._distance.pop(node_id, 0)

    def prune(self, in_flight: Callable[[str], bool], alive: Callable[[Node], bool]) -> list[str]:
        """Drop predictions that were never issued, and handles the search can no longer ask
        for; returns the ids of the latter (their jobs, if any, are the caller's to cancel)."""
        dead = []
        for node_id, handle in list(self._handles.items()):
            if not handle.generated and not in_flight(node_id):
                del self._handles[node_id]  # a prediction that was never issued
                continue
            if alive(handle):
                continue
            dead.append(node_id)
            del self._handles[node_id]
            self._distance.pop(node_id, None)
        return dead

    def evict(self) -> int:
        """Bound the generated, unused handles to `capacity`, oldest first; returns how many
        were dropped."""
        generated = [h for h in self._handles.values() if h.generated]
        over = generated[: max(0, len(generated) - self.capacity)]
        for handle in over:
            del self._handles[handle.id]
            self._distance.pop(handle.id, None)
        return len(over)

    def clear(self) -> None:
        self._handles.clear()
        self._distance.clear()


def spec_priority(distance: int) -> int:
    """The engine priority of a speculative job predicted `distance` ahead: the nearer, the
    likelier the search asks for it (hit rates fall with distance: BFS depth, DFS rollouts
    ahead), so the sooner it is admitted and the later it is retracted. Lower runs first, as
    SGLang (`--schedule-low-priority-values-first`) and vLLM take it; primaries are 0."""
    return SPECULATIVE + min(max(distance, 0), MAX_SPEC_PRIORITY - SPECULATIVE)
