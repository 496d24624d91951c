"""The interface every search algorithm implements.

An algorithm is a *program*: a Python generator that yields `Need` requests (these nodes must
be generated, and scored if asked) and is resumed once they are. It reads like the paper's
pseudo-code, holds no I/O and never reads a clock; the coordinator (`spex.shared.core.machine`)
drives it. Nodes are created through `Tree.child`, so identities are deterministic, and every
random choice is drawn with `spex.shared.core.ids.derived_*` from (seed, query, node, rollout).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar, Protocol

from spex.proto.messages import Algorithm, SimStyle
from spex.shared.core.search.answers import AnswerSelection
from spex.shared.core.tree import EXPAND, Node, Tree

__all__ = [
    "SEARCHES",
    "Need",
    "Program",
    "SearchAlgorithm",
    "SearchConfig",
    "SpecView",
    "make_algorithm",
    "preset_params",
]


@dataclass(frozen=True)
class Need:
    nodes: list[Node]
    scored: bool = True  # wait for the rewards too, not only the generations


Program = Generator[Need, None, list[Node]]  # returns the solution nodes


@dataclass(frozen=True)
class SearchConfig:
    """Per-algorithm settings; `target` is the paper's size (width or rollouts)."""

    algorithm: str = "rebase"
    target: int = 16
    answer_selection: AnswerSelection | None = None  # None: the algorithm's reference default
    max_step_tokens: int = 256
    params: dict[str, float] = field(default_factory=dict)  # algorithm-specific overrides


class SpecView(Protocol):
    """What a prediction hook may see: the tree plus speculative nodes.

    `child` returns the tree's node if the search already created it, else a speculative
    handle with the same identity (never added to the tree). Handles whose results are known
    have `generated` (and `reward`) filled in, like tree nodes."""

    def child(self, parent: Node, index: int, action: str = EXPAND) -> Node: ...

    def busy(self, node: Node) -> bool:
        """A generation of this node is in flight."""
        ...

    @property
    def events(self) -> int:
        """A version of what the query knows: it moves with every result, so a prediction
        made at one version holds until it moves."""
        ...


class SearchAlgorithm(ABC):
    name: Algorithm
    family: SimStyle  # breadth- or depth-first: the synthetic workload's step lengths follow it
    default_selection: AnswerSelection
    presets: ClassVar[dict[str, dict[str, float]]] = {}  # named parameter sets (`preset_params`)

    def __init__(self, tree: Tree, config: SearchConfig) -> None:
        self.tree = tree
        self.config = config

    @abstractmethod
    def run(self) -> Program: ...

    @property
    def rollouts_done(self) -> int | None:
        """Depth-first searches: rollouts finished so far (T3's progress); None otherwise."""
        return None

    @property
    def answer_selection(self) -> AnswerSelection:
        return self.config.answer_selection or self.default_selection

    # --- speculation hooks (T1). They read the algorithm's state and never change it.
    def predict(self, view: SpecView, k: int) -> list[Node]:
        """Up to `k` nodes the search will likely ask for next, most likely first; each is
        neither generated nor in flight."""
        return []

    def spec_alive(self, node: Node) -> bool:
        """False once the search can no longer ask for speculative node `node`."""
        return True

    def spec_distance(self, node: Node) -> int:
        """How far ahead a prediction reaches, for hit-rate-by-distance reports (BFS: the
        node's depth)."""
        return node.depth

    spec_decay = 0.8  # the prior's factor per rollout (or round) further ahead

    @classmethod
    def spec_saving(cls, sharing: int) -> float:
        """What a used speculative token saves, in primary tokens, on an engine `sharing`
        queries share: a depth-first search's next rollout waits on each of its nodes, so a
        hit shortens it by its whole length."""
        return 1.0

    def spec_likelihood(self, node: Node) -> float:
        """The prior probability that the search asks for speculative node `node`, which the
        query calibrates by its measured hits: a depth-first search is all but certain to
        ask for what its next simulated rollout (distance 1) wants, less for each one after."""
        return self.spec_decay ** max(0, self.spec_distance(node) - 1)


def apply_params(defaults: object, params: dict[str, float]) -> object:
    """Override dataclass `defaults` with `params`, rejecting unknown names."""
    names = {f.name: f for f in fields(defaults)}  # type: ignore[arg-type]
    for key in params:
        if key not in names:
            raise ValueError(f"unknown parameter {key!r}; known: {', '.join(names)}")
    typed = {k: type(getattr(defaults, k))(v) for k, v in params.items()}
    return replace(defaults, **typed)  # type: ignore[type-var]


# Each search's class by its name, one of the wire's ALGORITHMS (each module registers its own;
# a test holds the two equal). Keyed by `str`: a name from a request is looked up unchecked.
SEARCHES: dict[str, type[SearchAlgorithm]] = {}


def register(cls: type[SearchAlgorithm]) -> type[SearchAlgorithm]:
    SEARCHES[cls.name] = cls
    return cls


def preset_params(algorithm: str, preset: str | None, params: dict[str, float]) -> dict[str, float]:
    """`params` over the algorithm's named preset (None: no preset); unknown names fail."""
    if preset is None:
        return dict(params)
    cls = SEARCHES.get(algorithm)
    known = cls.presets if cls is not None else {}
    if preset not in known:
        names = ", ".join(sorted(known)) or "none"
        raise ValueError(f"preset: {algorithm} has no preset {preset!r}; known: {names}")
    return {**known[preset], **params}


def make_algorithm(tree: Tree, config: SearchConfig) -> SearchAlgorithm:
    cls = SEARCHES.get(config.algorithm)
    if cls is None:
        raise ValueError(f"unknown algorithm {config.algorithm!r}; known: {', '.join(sorted(SEARCHES))}")
    return cls(tree, config)
