"""The interface every search algorithm implements.

An algorithm is a *program*: a Python generator that yields `Need` requests (these nodes must
be generated, and scored if asked) and is resumed once they are. It reads like the paper's
pseudo-code, holds no I/O and never reads a clock; the coordinator (`spex.shared.core.machine`)
drives it. Nodes are created through `Tree.child`, so identities are deterministic, and every
random choice is drawn with `spex.shared.core.ids.derived_*` from (seed, query, node, rollout).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar, Literal, Protocol

from spex.proto.messages import ANSWER_SELECTIONS, SIM_STYLES, SimStyle
from spex.proto.submission import SEARCH_NAME
from spex.shared.core.search.answers import AnswerSelection
from spex.shared.core.tree import EXPAND, Node, Tree

__all__ = [
    "SEARCHES",
    "Need",
    "ParamValue",
    "Program",
    "SearchAlgorithm",
    "SearchConfig",
    "SpecView",
    "Wait",
    "apply_params",
    "make_algorithm",
    "parameter_defaults",
    "preset_params",
]

Wait = Literal["all", "any"]  # a Need is met when all its nodes are ready, or when any one is


@dataclass(frozen=True)
class Need:
    """What a search waits for: these nodes generated, and scored too if `scored`.

    With `wait="all"` (the default) the search is resumed once every node is ready, the reward
    barrier of a level; with `wait="any"`, once at least one is, so independent chains go on
    one by one. A search resumed early yields the nodes still pending again, with the next
    ones, and must decide nothing by which of them came first: every driver may deliver them
    in another order."""

    nodes: list[Node]
    scored: bool = True  # wait for the rewards too, not only the generations
    wait: Wait = "all"


Program = Generator[Need, None, list[Node]]  # returns the solution nodes
ParamValue = float | int | bool | str  # a search parameter's value (the wire carries float | str)


@dataclass(frozen=True)
class SearchConfig:
    """Per-algorithm settings; `target` is the paper's size (width or rollouts)."""

    algorithm: str = "rebase"
    target: int = 16
    answer_selection: AnswerSelection | None = None  # None: the algorithm's reference default
    max_step_tokens: int = 256
    params: Mapping[str, ParamValue] = field(default_factory=dict)  # algorithm-specific overrides


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
    """A search: `run` is its program; the `spec_*` hooks and `predict` let speculation run
    ahead of it (optional: without them nothing is predicted, and the search runs as it would
    without SPEX)."""

    name: ClassVar[str]  # how questions name it: lowercase letters, digits and _ (`register`)
    family: ClassVar[SimStyle]  # breadth- or depth-first: the synthetic workload's step lengths follow it
    default_selection: ClassVar[AnswerSelection]
    # The frozen dataclass of its parameters, with their defaults (None: it takes none); the
    # values a question gives are checked and typed by `apply_params`.
    parameters: ClassVar[type | None] = None
    presets: ClassVar[dict[str, dict[str, ParamValue]]] = {}  # named parameter sets (`preset_params`)

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

    def answer_weight(self, node: Node) -> float:
        """What solution `node` weighs in the answer's selection (`weighted`, `best`): its own
        step's reward unless the search scores paths otherwise."""
        return node.reward or 0.0

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


def apply_params(defaults: Any, params: Mapping[str, ParamValue]) -> Any:
    """Dataclass `defaults` with `params` over it: each value typed as its default is (a whole
    number for an int, 0/1 or true/false for a flag, text for a string); an unknown name or a
    value of the wrong kind raises ValueError naming the parameter."""
    names = [f.name for f in fields(defaults)]
    for key in params:
        if key not in names:
            raise ValueError(f"unknown parameter {key!r}; known: {', '.join(names) or 'none'}")
    typed = {k: _typed(k, getattr(defaults, k), v) for k, v in params.items()}
    return replace(defaults, **typed)


_FLAGS = {"1": True, "true": True, "0": False, "false": False}


def _typed(name: str, default: ParamValue, value: ParamValue) -> ParamValue:
    """`value` as the type of `default`, or ValueError naming parameter `name`."""
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError(f"parameter {name}: expected text, not {value!r}")
        return value
    if isinstance(value, str):
        if isinstance(default, bool) and value.lower() in _FLAGS:
            return _FLAGS[value.lower()]
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"parameter {name}: {value!r} is not a number") from None
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"parameter {name}: must be finite, not {value!r}")
    if isinstance(default, bool):
        if number not in (0.0, 1.0):
            raise ValueError(f"parameter {name}: a flag is 0 or 1, not {value!r}")
        return number == 1.0
    if isinstance(default, int):
        if not number.is_integer():
            raise ValueError(f"parameter {name}: must be a whole number, not {value!r}")
        return int(number)
    return number


def parameter_defaults(cls: type[SearchAlgorithm]) -> dict[str, ParamValue]:
    """The parameters search `cls` takes, by name, with their defaults."""
    params = cls.parameters
    if params is None:
        return {}
    defaults = params()
    return {f.name: getattr(defaults, f.name) for f in fields(defaults)}


# Each search's class by its name (each built-in module registers its own; a plug-in's are
# registered as `spex.shared.runtime.searches` loads it). Keyed by `str`: a name from a request
# is looked up unchecked.
SEARCHES: dict[str, type[SearchAlgorithm]] = {}


def register(cls: type[SearchAlgorithm]) -> type[SearchAlgorithm]:
    """Add search `cls` to `SEARCHES` under its `name` (a class decorator). The same class twice
    is one registration; another class under a taken name, a name a question could not carry,
    or a class missing what a search declares raises ValueError."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not SEARCH_NAME.fullmatch(name):
        raise ValueError(
            f"{cls.__qualname__}: a search's name is 1 to 40 of a-z, 0-9 and _, starting with a letter"
        )
    taken = SEARCHES.get(name)
    if taken is not None and taken is not cls:
        raise ValueError(f"search {name!r} is taken by {taken.__module__}.{taken.__qualname__}")
    if getattr(cls, "family", None) not in SIM_STYLES:
        raise ValueError(f"search {name!r}: family must be one of {', '.join(SIM_STYLES)}")
    if getattr(cls, "default_selection", None) not in ANSWER_SELECTIONS:
        raise ValueError(f"search {name!r}: default_selection must be one of {', '.join(ANSWER_SELECTIONS)}")
    if cls.parameters is not None and not is_dataclass(cls.parameters):
        raise ValueError(f"search {name!r}: parameters must be a dataclass")
    SEARCHES[name] = cls
    return cls


def preset_params(
    algorithm: str, preset: str | None, params: Mapping[str, ParamValue]
) -> dict[str, ParamValue]:
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
    """Search `config.algorithm` on `tree`; ValueError for an unknown name or bad parameters."""
    cls = SEARCHES.get(config.algorithm)
    if cls is None:
        raise ValueError(f"unknown algorithm {config.algorithm!r}; known: {', '.join(sorted(SEARCHES))}")
    return cls(tree, config)
