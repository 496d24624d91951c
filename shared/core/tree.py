"""The search tree of one query: nodes with deterministic identities.

A node's id is derived from its parent's id, its child index and its action
(`spex.shared.core.ids.child_id`), so the same node has the same id and sampling seed whatever order
work happens in. The tree holds only nodes the search itself asked for; speculative results
live elsewhere until the search asks for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from spex.proto.messages import NodeFinishReason
from spex.shared.core.ids import child_id, digest, node_seed, root_id

__all__ = ["Node", "Tree", "EXPAND", "ROLLOUT"]

EXPAND = "expand"  # a child the search keeps as part of the tree
ROLLOUT = "rollout"  # a lookahead step (ReST-MCTS* simulation), not a selectable child


@dataclass(eq=False)
class Node:
    id: str
    parent: Node | None
    index: int  # child index under the parent (-1 for the root)
    action: str
    depth: int  # root = 0
    seed: int  # per-node sampling seed
    children: list[Node] = field(default_factory=list)
    # Filled in when the node is generated:
    generated: bool = False
    text: str = ""
    tokens: int = 0  # tokens of this step (the question's tokens for the root)
    cum_tokens: int = 0  # generated tokens on the path from the root, this step included
    answer: str | None = None
    finish_reason: NodeFinishReason = ""
    mean_logprob: float = 0.0
    # Filled in when the node is scored (last-step reward):
    reward: float | None = None
    _child_ids: dict[tuple[int, str], str] = field(default_factory=dict, repr=False)

    def child_id(self, index: int, action: str) -> str:
        """Id of this node's child `index` for `action`. Predictions look the same children up
        again and again, so the id is remembered here, where it goes when the query's tree goes
        (a process-wide cache held the ids of queries long answered: ~6 KB each, up to 20 MiB)."""
        key = (index, action)
        cid = self._child_ids.get(key)
        if cid is None:
            cid = self._child_ids[key] = child_id(self.id, index, action)
        return cid

    @property
    def terminal(self) -> bool:
        """The step gives a final answer (REBASE's "The answer is" leaf test), or the model
        ended its output there (EOS): either way nothing follows it."""
        return self.answer is not None or self.finish_reason == "eos"

    @property
    def scored(self) -> bool:
        return self.reward is not None

    def path(self) -> list[Node]:
        """Nodes from the root's child down to this node (the root excluded)."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return out

    def kids(self, action: str = EXPAND) -> list[Node]:
        return [c for c in self.children if c.action == action]


class Tree:
    def __init__(self, query_id: str, seed: int, question_tokens: int) -> None:
        self.query_id = query_id
        self.seed = seed
        rid = root_id(query_id)
        self.root = Node(rid, None, -1, "root", 0, node_seed(seed, rid))
        self.root.generated = True
        self.root.tokens = question_tokens
        self.nodes: dict[str, Node] = {rid: self.root}

    def child(self, parent: Node, index: int, action: str = EXPAND) -> Node:
        """The child `index` of `parent` for `action`, created on first use."""
        cid = parent.child_id(index, action)
        node = self.nodes.get(cid)
        if node is None:
            node = Node(cid, parent, index, action, parent.depth + 1, node_seed(self.seed, cid))
            parent.children.append(node)
            self.nodes[cid] = node
        return node

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def digest(self, rewards: bool = False) -> str:
        """Hash of the tree's structure and every node's content (text, tokens, answer, why it
        ended), in a canonical order; with `rewards`, every reward exactly too. A real model's
        rewards differ in their last bits between batch shapes, so real content compares them
        apart (`rewards()`, within a tolerance); synthetic rewards are exact and hashed."""
        rows = sorted(
            (
                n.id,
                n.parent.id if n.parent else "",
                n.index,
                n.action,
                n.text,
                n.tokens,
                n.answer,
                n.finish_reason,
                repr(n.reward) if rewards else "",
            )
            for n in self.nodes.values()
        )
        return digest(self.query_id, *rows)

    def rewards(self) -> dict[str, float]:
        """Every scored node's reward, by node id."""
        return {n.id: n.reward for n in self.nodes.values() if n.reward is not None}
