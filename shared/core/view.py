"""A query's tree as a watcher sees it: every node the search asked for or speculation
generated, each in one state, and what changed since the last look.

States: `root` (the question), `primary` (the search asked for it and it was generated for
the search), `adopted` (the search asked for it and got it from speculation: a hit),
`speculative` (generated ahead, or being generated, not asked for yet), `cancelled` (a
speculative job stopped before it finished) and `unused` (a speculative node generated but
never asked for: dropped, evicted, or left when the query ended). The last two are final.
Only nodes whose generation was issued appear: a predictor's guesses never sent are not work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from spex.proto.messages import NODE_STATES, NodeState

if TYPE_CHECKING:
    from spex.shared.core.machine import QueryMachine
    from spex.shared.core.tree import Node

__all__ = ["NODE_STATES", "NodeState", "NodeView", "TreeWatch"]


@dataclass(frozen=True)
class NodeView:
    id: str
    parent: str  # "" for the root
    index: int
    action: str
    depth: int
    state: NodeState
    generated: bool
    running: bool  # its generation is in flight
    text: str
    tokens: int
    answer: str | None
    reward: float | None
    finish_reason: str


class TreeWatch:
    """The last view of each node handed out; `changes` gives the nodes whose view moved."""

    def __init__(self) -> None:
        self._last: dict[str, NodeView] = {}

    def changes(self, machine: QueryMachine) -> list[NodeView]:
        now: dict[str, NodeView] = {}
        for node in machine.tree:
            if node.parent is None:
                state: NodeState = "root"
            else:
                state = "adopted" if node.id in machine.adopted else "primary"
            now[node.id] = _view(node, state, machine.busy(node))
        for node in machine.speculative():
            running = machine.busy(node)
            if node.id not in now and (running or node.generated):
                now[node.id] = _view(node, "speculative", running)
        for nid, last in self._last.items():
            if nid not in now and last.state == "speculative":  # gone without the search asking
                final: NodeState = "unused" if last.generated else "cancelled"
                now[nid] = replace(last, state=final, running=False)
            elif nid not in now:
                now[nid] = last  # final already
        changed = [v for nid, v in now.items() if self._last.get(nid) != v]
        self._last = now
        return changed


def _view(node: Node, state: NodeState, running: bool) -> NodeView:
    return NodeView(
        node.id, node.parent.id if node.parent else "", node.index, node.action, node.depth, state,
        node.generated, running, node.text, node.tokens, node.answer, node.reward, node.finish_reason,
    )  # fmt: skip
