"""Pure tree-search algorithms (REBASE, ETS, rStar-MCTS, ReST-MCTS*) behind one interface."""

from shared.search import ets, rebase, rest, rstar  # noqa: F401  (each registers itself)
from shared.search.base import ALGORITHMS, Need, SearchAlgorithm, SearchConfig, make_algorithm

__all__ = ["ALGORITHMS", "Need", "SearchAlgorithm", "SearchConfig", "make_algorithm"]
