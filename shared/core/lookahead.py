"""The look-ahead predictor: speculation derived for any search, from the search itself.

A search is a program (`spex.shared.core.search.base`), and a Python generator cannot be
copied, so the search is *replayed*: a fresh instance of its class, over a shadow tree with
the real tree's query id and seed (the same node ids, the same derived random draws), is run
from the start. Every node it asks for is filled in from what the query knows — the real
tree's nodes and the speculative cache's generated handles — until it reaches what is not
known yet; from there on each unknown result is *guessed*:

- a pending reward is drawn from what the node's siblings and parent scored;
- a generation in flight, or not issued, is copied from a known peer (a sibling, else a node
  of the same depth, else its parent: its length, whether it ended in an answer, its reward).

Each draw runs the shadow search on to its end (or to a work bound), and records the nodes it
asks for that could be generated now: neither generated nor in flight, with a generated
parent. Ranked by how many draws ask for them, these are the prediction; the fraction of
draws that ask is the prior the cost-aware controller prices (`roofline.admission`). A draw's
guesses are derived from (seed, query, node, draw), so equal runs predict equally.

Lossless by construction: the real search never sees the shadow's guesses; speculation only
decides what to generate ahead, and the machine serves results by node identity.

A replay runs the search's whole history again, once per draw, so it costs the search's own
work times the draws: it is remembered until the query learns something (`SpecView.events`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from spex.shared.core.ids import derived_int, node_seed
from spex.shared.core.search.base import Need, SearchAlgorithm, SpecView
from spex.shared.core.tree import EXPAND, Node, Tree

__all__ = ["LookaheadParams", "LookaheadPredictor", "ShadowTree"]

UNKNOWN_PRIOR = 0.25  # a node no replay asked for (the machine asks only for what was offered)


@dataclass(frozen=True)
class LookaheadParams:
    draws: int = 4  # guessed futures per prediction
    # A draw for the prediction stops once it has offered `max_candidates` nodes or followed
    # the search `max_steps` requests past its first guess; one for `spec_alive` runs to the
    # search's end, or to `max_guessed` guessed nodes (the work bound).
    max_candidates: int = 32
    max_steps: int = 8
    max_guessed: int = 4096


IdMemo = dict[tuple[str, int, str], tuple[str, int]]  # (parent id, index, action) -> (id, seed)


class ShadowTree(Tree):
    """A tree with `real`'s identity (query id, seed, root) whose nodes are its own: the
    shadow search grows it, and nothing it holds reaches the real tree. The ids and seeds of
    nodes are remembered across replays in `ids` (hashing them is a replay's largest cost
    after the search's own work)."""

    def __init__(self, real: Tree, ids: IdMemo) -> None:
        super().__init__(real.query_id, real.seed, real.root.tokens)
        self._ids = ids

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
class _Draw:
    """What one guessed future asked for."""

    offers: list[tuple[Node, int]] = field(default_factory=list)  # (node, requests ahead), in order
    asked: set[str] = field(default_factory=set)  # every node outside the real tree it asked for
    opened: set[str] = field(default_factory=set)  # real tree nodes it gave new children
    complete: bool = True  # it ran to the search's end (else its silence proves nothing)


class LookaheadPredictor:
    """A `Predictor` for any `SearchAlgorithm`, by replaying it ahead under guessed results."""

    def __init__(self, algorithm: SearchAlgorithm, params: LookaheadParams | None = None) -> None:
        if params is not None and params.draws < 1:
            raise ValueError(f"draws: at least 1, not {params.draws}")
        self.algorithm = algorithm
        self.params = params or LookaheadParams()
        self._view: SpecView | None = None
        self._version = -1  # the view's version the prediction is of
        self._ranked: list[Node] = []
        self._likely: dict[str, float] = {}
        self._distance: dict[str, int] = {}
        self._short: list[_Draw] = []  # the prediction's draws
        self._long: list[_Draw] | None = None  # the same draws run to the end (`spec_alive`)
        self._ids: IdMemo = {}  # the shadow trees' ids and seeds (bounded)
        self.replays = 0  # draws replayed, for the cost a prediction has

    # ------------------------------------------------------------------ the Predictor protocol
    def predict(self, view: SpecView, k: int) -> list[Node]:
        self._refresh(view)
        out = [n for n in self._ranked if not n.generated and not view.busy(n)]
        return out[:k]

    def spec_alive(self, node: Node) -> bool:
        """A speculative node lives while some draw asks for it, or gives its nearest tree
        ancestor a new child (a search that decides a node's children together leaves the
        rest unasked; a search that comes back to a node asks again), or while a draw stopped
        at the work bound before the search's end (it could ask later). The prediction's draws
        answer first; where they stopped short, the same draws run on to the end."""
        if self._view is None:
            return True  # nothing predicted yet, so nothing to judge by
        self._refresh(self._view)
        verdict = _verdict(self._short, node, self.algorithm.tree)
        if verdict is None:
            if self._long is None:
                self._long = self._draws(self._view, bounded=False)
            verdict = _verdict(self._long, node, self.algorithm.tree)
        return verdict is not False

    def spec_distance(self, node: Node) -> int:
        """The search's requests between the one it waits on and the one that asks for `node`
        (1: the next), the nearest over the draws."""
        return self._distance.get(node.id, 1)

    def spec_likelihood(self, node: Node) -> float:
        """The fraction of draws that ask for `node`."""
        return self._likely.get(node.id, UNKNOWN_PRIOR)

    # ------------------------------------------------------------------ the replays
    def _refresh(self, view: SpecView) -> None:
        if view is self._view and view.events == self._version:
            return
        self._view, self._version = view, view.events
        if len(self._ids) > 4 * self.params.max_guessed:
            self._ids.clear()
        self._short, self._long = self._draws(view, bounded=True), None
        self._rank(self._short)

    def _draws(self, view: SpecView, bounded: bool) -> list[_Draw]:
        peers = _Peers(self.algorithm.tree)
        self.replays += self.params.draws
        return [self._draw(view, peers, d, bounded) for d in range(self.params.draws)]

    def _rank(self, draws: list[_Draw]) -> None:
        count: dict[str, int] = {}
        place: dict[str, float] = {}
        ahead: dict[str, int] = {}
        node_of: dict[str, Node] = {}
        for draw in draws:
            for i, (node, steps) in enumerate(draw.offers):
                count[node.id] = count.get(node.id, 0) + 1
                place[node.id] = place.get(node.id, 0.0) + i
                ahead[node.id] = min(steps, ahead.get(node.id, steps))
                node_of[node.id] = node
        n = len(draws)
        # Most draws first; among equals, the one asked for sooner (its mean place).
        order = sorted(count, key=lambda c: (-count[c], place[c] / count[c]))
        self._ranked = [node_of[c] for c in order]
        self._likely = {c: count[c] / n for c in order}
        self._distance = ahead

    def _draw(self, view: SpecView, peers: _Peers, draw: int, bounded: bool) -> _Draw:
        """One guessed future: the search replayed from its start over a shadow tree, up to
        the prediction's bound (`bounded`) or to its end."""
        real_tree, p = self.algorithm.tree, self.params
        shadow = ShadowTree(real_tree, self._ids)
        search = type(self.algorithm)(shadow, self.algorithm.config)
        real: dict[str, Node | None] = {shadow.root.id: real_tree.root}  # shadow id -> its real node
        out = _Draw()
        first_step = max(1, self.algorithm.config.max_step_tokens // 2)
        guesser = _Guesser(peers, real_tree.seed, real_tree.query_id, draw, first_step)
        guessing = False  # past the first request that needed a guess
        steps = guessed = 0
        program = search.run()
        try:
            need: Need = next(program)
            while True:
                if guessing:
                    steps += 1
                    over = bounded and (steps > p.max_steps or len(out.offers) >= p.max_candidates)
                    if over or guessed > p.max_guessed:
                        out.complete = False
                        break
                fresh = 0
                for node in need.nodes:
                    fresh += self._fill(view, node, need.scored, real, guesser, out, max(1, steps))
                guessing = guessing or fresh > 0
                guessed += fresh
                need = next(program)
        except StopIteration:
            pass
        except Exception:  # a search that fails on guessed results fails only this guess
            out.complete = False
        finally:
            program.close()
        return out

    def _fill(
        self,
        view: SpecView,
        node: Node,
        scored: bool,
        real: dict[str, Node | None],
        guesser: _Guesser,
        out: _Draw,
        ahead: int,
    ) -> int:
        """Give shadow `node` what the query knows of it, else a guess; returns 1 if anything
        was guessed. A node asked for the first time is classified by its real counterpart:
        known (generated), in flight, an offer (its parent generated: it could be issued now),
        or out of reach (its parent is itself a guess)."""
        r = real.get(node.id)
        if node.id not in real:
            parent = node.parent
            rp = real.get(parent.id) if parent is not None else None
            r = view.child(rp, node.index, node.action) if rp is not None and rp.generated else None
            real[node.id] = r
            if r is not None and r.id not in self.algorithm.tree.nodes:
                out.asked.add(r.id)
                if rp is not None and rp.id in self.algorithm.tree.nodes:
                    out.opened.add(rp.id)
                if not r.generated and not view.busy(r) and len(out.offers) < self.params.max_candidates:
                    out.offers.append((r, ahead))
        fresh = 0
        if not node.generated:
            if r is not None and r.generated:
                _copy_generation(node, r)
                if r.scored:
                    node.reward = r.reward
            else:
                guesser.generation(node, real)
                fresh = 1
        if scored and node.reward is None:
            node.reward = guesser.reward(node, real)
            fresh = 1
        return fresh


def _verdict(draws: list[_Draw], node: Node, tree: Tree) -> bool | None:
    """Whether some draw asks for `node` or opens its nearest tree ancestor (True), none does
    though each ran to the search's end (False), or the draws cannot tell (None)."""
    if any(node.id in d.asked for d in draws):
        return True
    anc = node.parent
    while anc is not None and anc.id not in tree.nodes:
        anc = anc.parent
    if anc is not None and any(anc.id in d.opened for d in draws):
        return True
    return False if all(d.complete for d in draws) else None


class _Peers:
    """The real tree's generated nodes by depth: where a guess looks when a node has no
    generated sibling. Built once a prediction, shared by its draws."""

    def __init__(self, tree: Tree) -> None:
        self.by_depth: dict[int, list[Node]] = {}
        self.scored_by_depth: dict[int, list[Node]] = {}
        for node in tree:
            if node.parent is None or not node.generated:
                continue
            self.by_depth.setdefault(node.depth, []).append(node)
            if node.scored:
                self.scored_by_depth.setdefault(node.depth, []).append(node)


@dataclass
class _Guesser:
    """One draw's guesses, each derived from (seed, query, node, draw)."""

    peers: _Peers
    seed: int
    query_id: str
    draw: int
    first_step: int  # a first step's length when none is known yet (tokens)

    def _pick(self, pool: list[Node], node: Node, what: str) -> Node:
        if len(pool) == 1:
            return pool[0]
        return pool[derived_int(len(pool), self.seed, self.query_id, node.id, self.draw, what)]

    def generation(self, node: Node, real: dict[str, Node | None]) -> None:
        """A known peer's generation (and its reward, if scored): a generated sibling, else a
        generated node of the same depth, else the parent's own (an unfinished step, not the
        question's length)."""
        parent = node.parent
        assert parent is not None
        pool = list(_known_siblings(node, real)) or self.peers.by_depth.get(node.depth, [])
        if pool:
            peer = self._pick(pool, node, "generation")
            _copy_generation(node, peer)
            node.reward = peer.reward
        else:
            node.generated = True
            node.tokens = parent.tokens if parent.parent is not None else self.first_step
        node.cum_tokens = parent.cum_tokens + node.tokens

    def reward(self, node: Node, real: dict[str, Node | None]) -> float:
        """What a scored sibling or the parent scored, else a scored node of the same depth."""
        pool = [s for s in _known_siblings(node, real) if s.scored]
        parent = node.parent
        if parent is not None and parent.scored:
            pool.append(parent)
        if not pool:
            pool = self.peers.scored_by_depth.get(node.depth, [])
        return (self._pick(pool, node, "reward").reward or 0.0) if pool else 0.0


def _known_siblings(node: Node, real: dict[str, Node | None]) -> Iterator[Node]:
    """The generated children of `node`'s real parent (other than `node`), of its action."""
    parent = node.parent
    rp = real.get(parent.id) if parent is not None else None
    if rp is None:
        return
    for sibling in rp.children:
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
