"""Write your own search: the public interface of a SPEX search.

A search is a class in your own module, subclassing `SearchAlgorithm`, registered with
`register`, and found by SPEX through an entry point of the group `spex.searches` (its name is
the search's, its object the class) or through `SPEX_SEARCH_PLUGINS=module[,module…]` (modules
importable from the Python path). Every service of a deployment loads the same plug-ins at
its start, and questions name the search (`"algorithm": "<name>"`, `spex:<name>-<target>`).

Its `run` is a *program*: a generator that yields `Need`s — these nodes generated, and scored
if asked — and is resumed once they are, returning the solution nodes at the end. Nodes come
from `Tree.child(parent, index)`: a node's identity (and its sampling seed) is its parent's
and its index, so the same search asks for the same nodes whatever the order work happens
in, which is what lets SPEX generate some of them ahead of time and hand them over when the
search asks (speculation), without changing the tree: the search only ever sees results it
asked for. A program must therefore decide from what it was given only — the nodes' texts,
answers and rewards, its `config`, draws from `derived_uniform`/`derived_int` keyed by the
tree's seed — never from a clock, a shared random stream or the order results came in.

Speculation needs nothing more. A search may help it with the optional hooks of
`SearchAlgorithm` (`predict`, `spec_alive`, `spec_likelihood`, `spec_distance`,
`spec_saving`): which nodes it will likely ask for next, and how likely; without them the
search runs with SPEX as it runs without.

The answer is chosen among the solutions by the question's `answer_selection` or the
search's `default_selection` (`select_answer`: majority, weighted, best), each solution
weighing `answer_weight(node)` (its step's reward unless the search says otherwise).

Everything here is a promise kept across releases; the rest of `spex` is not.
"""

from spex.shared.core.ids import derived_int, derived_uniform
from spex.shared.core.search.answers import SELECTIONS, AnswerSelection, extract_answer, select_answer
from spex.shared.core.search.base import (
    Need,
    ParamValue,
    Program,
    SearchAlgorithm,
    SearchConfig,
    SpecView,
    Wait,
    apply_params,
    register,
)
from spex.shared.core.search.sal import AGGREGATIONS, aggregate, path_score, to_the_end
from spex.shared.core.tree import EXPAND, Node, Tree

__all__ = [
    "AGGREGATIONS",
    "EXPAND",
    "SELECTIONS",
    "AnswerSelection",
    "Need",
    "Node",
    "ParamValue",
    "Program",
    "SearchAlgorithm",
    "SearchConfig",
    "SpecView",
    "Tree",
    "Wait",
    "aggregate",
    "apply_params",
    "derived_int",
    "derived_uniform",
    "extract_answer",
    "path_score",
    "register",
    "select_answer",
    "to_the_end",
]
