"""Pure tree-search algorithms behind one interface: REBASE, ETS, rStar-MCTS, ReST-MCTS*, and
search-and-learn's beam search, DVTS and best-of-N."""

from spex.shared.core.search import beam, best_of_n, dvts, ets, rebase, rest, rstar  # noqa: F401  (each registers itself)
from spex.shared.core.search.base import SEARCHES, Need, SearchAlgorithm, SearchConfig, make_algorithm

__all__ = ["SEARCHES", "Need", "SearchAlgorithm", "SearchConfig", "make_algorithm"]
