"""Pure tree-search algorithms (REBASE, ETS, rStar-MCTS, ReST-MCTS*) behind one interface."""

from spex.shared.core.search import ets, rebase, rest, rstar  # noqa: F401  (each registers itself)
from spex.shared.core.search.base import SEARCHES, Need, SearchAlgorithm, SearchConfig, make_algorithm

__all__ = ["SEARCHES", "Need", "SearchAlgorithm", "SearchConfig", "make_algorithm"]
