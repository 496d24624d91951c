"""search-and-learn's beam search and DVTS loops, written again from the reference
(`src/sal/search/beam_search.py#L42-197`, `diverse_verifier_tree_search.py#L45-159`) over a
content table, to check the built-ins against: numpy ranks the beams as the reference does.

A step is named by its path of child indices from the question; the content of every step is
a pure function of that path (`Content`). The reference samples a copy's step afresh; a step
tree names the k-th copy of a beam in the list its child k, and these loops do the same. A
generation "to the end" is a chain of first children.
"""

import math

import numpy as np

from spex.shared.core.ids import derived_int, derived_uniform
from spex.shared.core.search.base import SearchConfig, make_algorithm
from spex.shared.core.tree import Tree

REWARDS = (0.2, 0.5, 0.8)  # few values: ties are common


class Content:
    """Each step's text, tokens, answer and reward, drawn from its path: terminal with
    probability `terminal` (more with depth), a text out of `texts` (so whole texts repeat)."""

    def __init__(self, seed, terminal=0.15, texts=3, tokens=(20, 120)):
        self.seed, self.terminal, self.texts, self.tokens = seed, terminal, texts, tokens

    def step(self, path):
        key = (self.seed, *path)
        depth = len(path)
        ends = derived_uniform("end", *key) < self.terminal * depth
        answer = str(derived_int(3, "ans", *key)) if ends else None
        text = f"step {derived_int(self.texts, 'text', *key)}" + (f" The answer is {answer}." if ends else "")
        low, high = self.tokens
        tokens = low + derived_int(high - low + 1, "tok", *key)
        return text, tokens, answer, REWARDS[derived_int(len(REWARDS), "r", *key)]


def grow_by_content(algorithm, target, content, order_seed=0, **params):
    """Run a built-in's program over `content`, filling the nodes each Need asks for (for a
    Need that waits for any, a drawn subset first): (tree, solutions as paths)."""
    tree = Tree("q", 7, 50)
    search = make_algorithm(tree, SearchConfig(algorithm, target, params=params))
    program = search.run()
    rng = np.random.default_rng(order_seed)
    try:
        need = next(program)
        while True:
            todo = [n for n in need.nodes if not n.generated]
            if need.wait == "any" and len(todo) > 1:
                todo = [n for n in todo if rng.random() < 0.5] or todo[:1]
            for node in todo:
                fill(node, content)
            need = program.send(None)
    except StopIteration as stop:
        return tree, [path_of(n) for n in stop.value], search


def fill(node, content):
    text, tokens, answer, reward = content.step(path_of(node))
    node.generated, node.text, node.tokens, node.answer = True, text, tokens, answer
    node.finish_reason = "stop"
    node.cum_tokens = tokens + node.parent.cum_tokens
    node.reward = reward


def path_of(node):
    return tuple(n.index for n in node.path())


def grown(tree):
    """Every step of the tree, as paths."""
    return sorted(path_of(n) for n in tree if n.parent is not None)


def aggregate(scores, how):
    return {"last": scores[-1], "min": min(scores), "prod": math.prod(scores)}[how]


class Beam:
    def __init__(self, path, content):
        self.path, self.content = path, content
        self.pruned = self.completed = False

    def scores(self):
        return [self.content.step(self.path[:i])[3] for i in range(1, len(self.path) + 1)]

    def text(self):
        return "".join(self.content.step(self.path[:i])[0] for i in range(1, len(self.path) + 1))

    def ended(self):
        return self.content.step(self.path)[2] is not None


def to_the_end(path, content, max_tokens):
    """A chain of first children from step `path` (already generated) to its end."""
    spent = content.step(path)[1]
    while content.step(path)[2] is None and spent < max_tokens:
        path = (*path, 0)
        spent += content.step(path)[1]
    return path


def reference_beam_search(n, m, iterations, content, agg="last", filter_duplicates=False,
                          sort_completed=False, max_tokens=2048):  # fmt: skip
    """`_beam_search`'s loop: (every step grown, as paths; the completed beams' paths)."""
    grown_paths, completed = set(), []
    active = [Beam((), content) for _ in range(n)]
    for i in range(iterations):
        active = [b for b in active if not b.pruned]
        if len(active) != n:
            repeats = (n // len(active)) + 1
            active = [Beam(b.path, content) for b in (active * repeats)[:n]]
        copies = {}
        for b in active:  # each copy samples one step: the k-th copy of a path, its child k
            k = copies.get(b.path, 0)
            copies[b.path] = k + 1
            b.path = (*b.path, k)
            grown_paths.add(b.path)
            if i == iterations - 1:  # generate to the end
                end = to_the_end(b.path, content, max_tokens)
                grown_paths.update(end[:j] for j in range(len(b.path), len(end) + 1))
                b.path = end
                b.completed = True
            elif b.ended():
                b.completed = True
            if b.completed:
                completed.append(b)
        agg_scores = [aggregate(b.scores(), agg) for b in active if not b.completed]
        active = [b for b in active if not b.completed]
        if not active:
            break
        if filter_duplicates:
            unique = {}
            for j, b in enumerate(active):
                unique.setdefault(b.text(), j)
            active = [active[j] for j in unique.values()]
            agg_scores = [agg_scores[j] for j in unique.values()]
        top = np.argsort(np.array(agg_scores), kind="stable")[-(n // m) :]
        for j, b in enumerate(active):
            if j not in top:
                b.pruned = True
    if sort_completed:
        completed = sorted(completed, key=lambda b: aggregate(b.scores(), agg), reverse=True)[:n]
    else:
        completed = completed[:n]
    if completed and len(completed) != n:
        completed = (completed * (n // len(completed) + 1))[:n]
    return sorted(grown_paths), [b.path for b in completed]


def reference_dvts(n, m, iterations, content, agg="last", max_tokens=2048):
    """`_dvts`'s loop: (every step grown, as paths; the output's paths)."""
    grown_paths = set()
    beams = [{"path": (), "pruned": False, "last": []} for _ in range(n // m)]
    for i in range(iterations):
        gen = [b for b in beams if not b["pruned"]]
        if not gen:
            break
        for t, b in enumerate(beams):
            if b["pruned"]:
                continue
            first = t * m if b["path"] == () else 0
            cands = [(*b["path"], first + j) for j in range(m)]
            grown_paths.update(cands)
            if i == iterations - 1:
                ends = [to_the_end(c, content, max_tokens) for c in cands]
                for c, e in zip(cands, ends):
                    grown_paths.update(e[:j] for j in range(len(c), len(e) + 1))
                cands = ends
            scores = [aggregate(Beam(c, content).scores(), agg) for c in cands]
            best = int(np.argmax(scores))
            b["path"], b["last"] = cands[best], cands
            if Beam(b["path"], content).ended():  # an answer ends it (EOS or boxed in the reference)
                b["pruned"] = True
    return sorted(grown_paths), [c for b in beams for c in b["last"]]
