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

from spex.proto.messages import NODE_STATES, NodeFinishReason, NodeState

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
    finish_reason: NodeFinishReason


class TreeWatch:
    """The last view of each node handed out; `changes` gives the nodes whose view moved, each
    with whether its text is new to the watcher (a step's text is sent once)."""

    def __init__(self) -> None:
        self._last: dict[str, NodeView] = {}
        self._nodes: dict[str, Node] = {}  # the speculative nodes last seen, for how they ended

    def changes(self, machine: QueryMachine) -> list[tuple[NodeView, bool]]:
        now: dict[str, NodeView] = {}
        for node in machine.tree:
            if node.parent is None:
                state: NodeState = "root"
            else:
                state = "adopted" if node.id in machine.adopted else "primary"
            now[node.id] = _view(node, state, machine.busy(node))
        speculative: dict[str, Node] = {}
        for node in machine.speculative():
            running = machine.busy(node)
            if node.id not in now and (running or node.generated):
                now[node.id] = _view(node, "speculative", running)
                speculative[node.id] = node
        for nid, last in self._last.items():
            if nid not in now and last.state == "speculative":  # gone without the search asking
                gone = self._nodes.get(nid)  # it may have finished since it was last seen
                seen = _view(gone, "speculative", False) if gone is not None else last
                now[nid] = replace(seen, state="unused" if seen.generated else "cancelled", running=False)
            elif nid not in now:
                now[nid] = last  # final already
        changed = []
        for nid, view in now.items():
            before = self._last.get(nid)
            if before != view:
                changed.append((view, before is None or before.text != view.text))
        self._last, self._nodes = now, speculative
        return changed


def _view(node: Node, state: NodeState, running: bool) -> NodeView:
    return NodeView(
        node.id, node.parent.id if node.parent else "", node.index, node.action, node.depth, state,
        node.generated, running, node.text, node.tokens, node.answer, node.reward, node.finish_reason,
    )  # fmt: skip
