"""One guessed future of a search: the search replayed from its start over a shadow tree (the
look-ahead predictor's draw, `spex.shared.core.lookahead`).

The shadow search is a fresh instance of the search's class, over a `ShadowTree` with the real
tree's query id and seed: the same node ids, the same derived random draws. Each node it asks
for is filled in from what the query knows (`SpecView`: the real tree's nodes, the speculative
cache's generated handles); what is not known yet is guessed (`Guesser`). Nothing the shadow
holds reaches the real tree.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from spex.shared.core.ids import derived_uniform, node_seed
from spex.shared.core.search.base import Need, SearchAlgorithm, SpecView
from spex.shared.core.tree import EXPAND, Node, Tree

__all__ = ["Bounds", "Draw", "Guesser", "Known", "Memo", "ShadowTree", "replay"]


@dataclass
class Memo:
    """What replays name again and again, kept across a query's predictions (bounded): node
    ids and seeds, and each guess's uniform draw (hashing is a replay's largest cost after the
    search's own work)."""

    limit: int
    ids: dict[tuple[str, int, str], tuple[str, int]] = field(default_factory=dict)  # (parent, index, action)
    uniforms: dict[tuple[str, int, str], float] = field(default_factory=dict)  # (node, draw, what)

    def trim(self) -> None:
        if len(self.ids) > self.limit:
            self.ids.clear()
        if len(self.uniforms) > self.limit:
            self.uniforms.clear()


class ShadowTree(Tree):
    """A tree with `real`'s identity (query id, seed, root) whose nodes are its own."""

    def __init__(self, real: Tree, memo: Memo) -> None:
        super().__init__(real.query_id, real.seed, real.root.tokens)
        self._ids = memo.ids

    def child(self, parent: Node, index: int, action: str = EXPAND) -> Node:
        key = (parent.id, index, action)
        known = self._ids.get(key)
        if known is None:
            cid = parent.child_id(index, action)
            known = self._ids[key] = (cid, node_seed(self.seed, cid))
        cid, seed = known
        node = self.nodes.get(cid)
        if node is None:
            node = Node(cid, parent, index, action, parent.depth + 1, seed)
            parent.children.append(node)
            self.nodes[cid] = node
        return node


@dataclass
class Draw:
    """What one guessed future asked for."""

    offers: list[tuple[Node, int]] = field(default_factory=list)  # (node, requests ahead), in order
    asked: set[str] = field(default_factory=set)  # every node outside the real tree it asked for
    shallowest: int | None = None  # the least depth it asked for past its first guess
    complete: bool = True  # it ran to the search's end (else its silence proves nothing)


@dataclass(frozen=True)
class Bounds:
    """Where a draw stops (`LookaheadParams` gives them): `offers` offered, `steps` requests
    followed past the first guess, `idle` requests in a row out of reach, `guessed` nodes."""

    offers: int
    steps: int
    idle: int
    guessed: int


class Known:
    """What the query knows of its real tree, for a prediction's draws: its nodes, and its
    generated ones by depth (where a guess looks when a node has no generated sibling)."""

    def __init__(self, tree: Tree) -> None:
        self.root, self.tree_nodes = tree.root, tree.nodes
        self.by_depth: dict[int, list[Node]] = {}
        self.scored_by_depth: dict[int, list[Node]] = {}
        for node in tree:
            if node.parent is None or not node.generated:
                continue
            self.by_depth.setdefault(node.depth, []).append(node)
            if node.scored:
                self.scored_by_depth.setdefault(node.depth, []).append(node)


@dataclass
class Guesser:
    """One draw's guesses, each derived from (seed, query, node, draw)."""

    known: Known
    memo: Memo
    seed: int
    query_id: str
    draw: int
    first_step: int  # a first step's length when none is known yet (tokens)

    def _pick(self, pool: list[Node], node: Node, what: str) -> Node:
        if len(pool) == 1:
            return pool[0]
        key = (node.id, self.draw, what)
        u = self.memo.uniforms.get(key)
        if u is None:
            u = self.memo.uniforms[key] = derived_uniform(self.seed, self.query_id, node.id, self.draw, what)
        return pool[min(int(u * len(pool)), len(pool) - 1)]

    def generation(self, node: Node, real_parent: Node | None) -> None:
        """A known peer's generation (and its reward, if scored): a generated sibling, else a
        generated node of the same depth, else the parent's own (an unfinished step, not the
        question's length)."""
        parent = node.parent
        assert parent is not None
        pool = list(_known_siblings(node, real_parent)) or self.known.by_depth.get(node.depth, [])
        if pool:
            peer = self._pick(pool, node, "generation")
            _copy_generation(node, peer)
            node.reward = peer.reward
        else:
            node.generated = True
            node.tokens = parent.tokens if parent.parent is not None else self.first_step
        node.cum_tokens = parent.cum_tokens + node.tokens

    def reward(self, node: Node, real_parent: Node | None) -> float:
        """What a scored sibling or the parent scored, else a scored node of the same depth."""
        pool = [s for s in _known_siblings(node, real_parent) if s.scored]
        parent = node.parent
        if parent is not None and parent.scored:
            pool.append(parent)
        if not pool:
            pool = self.known.scored_by_depth.get(node.depth, [])
        return (self._pick(pool, node, "reward").reward or 0.0) if pool else 0.0


def replay(search: SearchAlgorithm, view: SpecView, guesser: Guesser, bounds: Bounds, short: bool) -> Draw:
    """Run `search` (a fresh instance over a `ShadowTree`) from its start, filling in each node
    it asks for, to its end or `bounds.guessed` guessed nodes; `short`, for a prediction, to
    the first of `bounds`. A breadth-first search never comes back up, so a short draw follows
    it no further than its first request out of reach; a depth-first one returns to the root
    each rollout, and is followed through `bounds.idle` such requests."""
    r = _Replay(search, view, guesser)
    idle_limit = 1 if search.family == "bfs" else bounds.idle
    guessing = False  # past the first request that needed a guess
    steps = idle = guessed = 0
    program = search.run()
    try:
        need: Need = next(program)
        while True:
            if guessing:
                steps += 1
                stop = short and (
                    len(r.out.offers) >= bounds.offers or steps > bounds.steps or idle >= idle_limit
                )
                if stop or guessed > bounds.guessed:
                    r.out.complete = False
                    break
                depth = min((n.depth for n in need.nodes), default=None)
                if depth is not None and (r.out.shallowest is None or depth < r.out.shallowest):
                    r.out.shallowest = depth
            fresh = reach = 0
            for node in need.nodes:
                f, known = r.fill(node, need.scored, max(1, steps), bounds.offers)
                fresh, reach = fresh + f, reach + known
            idle = idle + 1 if guessing and not reach else 0
            guessing = guessing or fresh > 0
            guessed += fresh
            need = next(program)
    except StopIteration:
        pass
    except Exception:  # a search that fails on guessed results fails only this guess
        r.out.complete = False
    finally:
        program.close()
    return r.out


class _Replay:
    """The state of one draw: each shadow node's real counterpart, and what it asked for."""

    def __init__(self, search: SearchAlgorithm, view: SpecView, guesser: Guesser) -> None:
        self.view, self.guesser = view, guesser
        self.tree_nodes = guesser.known.tree_nodes
        self.real: dict[str, Node | None] = {search.tree.root.id: guesser.known.root}
        self.out = Draw()

    def fill(self, node: Node, scored: bool, ahead: int, max_offers: int) -> tuple[int, int]:
        """Give shadow `node` what the query knows of it, else a guess; returns (1 if anything
        was guessed, 1 if it is within reach). A node asked for the first time is classified
        by its real counterpart: known (generated), in flight, an offer (its parent generated:
        it could be issued now), or out of reach (its parent is itself a guess)."""
        real = self.real
        parent = node.parent
        rp = real.get(parent.id) if parent is not None else None
        if node.id in real:
            r = real[node.id]
        else:
            r = self.view.child(rp, node.index, node.action) if rp is not None and rp.generated else None
            real[node.id] = r
            if r is not None and r.id not in self.tree_nodes:
                self.out.asked.add(r.id)
                if not r.generated and not self.view.busy(r) and len(self.out.offers) < max_offers:
                    self.out.offers.append((r, ahead))
        fresh = 0
        if not node.generated:
            if r is not None and r.generated:
                _copy_generation(node, r)
                if r.scored:
                    node.reward = r.reward
            else:
                self.guesser.generation(node, rp)
                fresh = 1
        if scored and node.reward is None:
            node.reward = self.guesser.reward(node, rp)
            fresh = 1
        return fresh, int(r is not None)


def _known_siblings(node: Node, real_parent: Node | None) -> Iterator[Node]:
    """The generated children of `node`'s real parent (other than `node`), of its action."""
    if real_parent is None:
        return
    for sibling in real_parent.children:
        if sibling.generated and sibling.id != node.id and sibling.action == node.action:
            yield sibling


def _copy_generation(node: Node, source: Node) -> None:
    node.generated = True
    node.text, node.tokens, node.cum_tokens = source.text, source.tokens, source.cum_tokens
    node.answer, node.finish_reason, node.mean_logprob = (
        source.answer,
        source.finish_reason,
        source.mean_logprob,
    )
