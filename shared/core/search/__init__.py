"""Pure tree-search algorithms (REBASE, ETS, rStar-MCTS, ReST-MCTS*) behind one interface."""

from spex.shared.core.search import ets, rebase, rest, rstar  # noqa: F401  (each registers itself)
from spex.shared.core.search.base import SEARCHES, Need, SearchAlgorithm, SearchConfig, make_algorithm

__all__ = ["SEARCHES", "Need", "SearchAlgorithm", "SearchConfig", "make_algorithm"]

# The coordinator's name for SEARCHES until it imports that one (issue 37): not a second table.
ALGORITHMS = SEARCHES
