"""Small object factories shared by tests."""

from spex.shared.core.tree import Node, Tree


def answer_nodes(pairs) -> list[Node]:
    """Solution nodes under one root, one per (answer, last-step reward) pair."""
    tree = Tree("q", seed=0, question_tokens=1)
    out = []
    for i, (answer, reward) in enumerate(pairs):
        node = tree.child(tree.root, i)
        node.answer, node.reward = answer, reward
        out.append(node)
    return out
