"""The sans-IO brain of the tree coordinator: one state machine per query.

It takes events (node generated, node scored) and returns commands (generate, score,
finish); it never touches Redis, asyncio or a clock — time arrives as an argument. The
virtual-time simulator (`shared.vtime`) and the Redis service are thin drivers around it.

The search algorithm is a program (`shared.search.base`) that yields `Need` requests; the
machine turns each needed node into a generate command, scores every generated node (the
tree records every reward), and resumes the program once its request is satisfied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.search import Need, SearchConfig, make_algorithm
from shared.search.answers import extract_answer, select_answer
from shared.sim.radix import Segment
from shared.tree import Node, Tree

__all__ = [
    "Command",
    "FinishCommand",
    "GenerateCommand",
    "QueryMachine",
    "ScoreCommand",
    "prompt_segments",
]

REWARDS = ("prm", "logprob")


@dataclass(frozen=True)
class GenerateCommand:
    node: Node
    prompt: tuple[Segment, ...]  # (node id, tokens) from the root: what the step continues
    max_new_tokens: int
    priority: int = 0


@dataclass(frozen=True)
class ScoreCommand:
    node: Node
    prompt: tuple[Segment, ...]  # the path including the node


@dataclass(frozen=True)
class FinishCommand:
    query_id: str
    answer: str | None


Command = GenerateCommand | ScoreCommand | FinishCommand


def prompt_segments(node: Node) -> tuple[Segment, ...]:
    """The node's context as cache segments: question, then every step down to `node`."""
    out: list[Segment] = []
    n: Node | None = node
    while n is not None:
        out.append((n.id, n.tokens))
        n = n.parent
    out.reverse()
    return tuple(out)


@dataclass
class QueryStats:
    nodes_generated: int = 0
    tokens_generated: int = 0
    nodes_scored: int = 0


@dataclass
class QueryMachine:
    query_id: str
    question_tokens: int
    config: SearchConfig
    seed: int
    reward: str = "prm"
    tree: Tree = field(init=False)
    stats: QueryStats = field(default_factory=QueryStats)
    done: bool = False
    answer: str | None = None
    solutions: list[Node] = field(default_factory=list)
    started_s: float = 0.0
    finished_s: float = 0.0

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, not {self.reward!r}")
        self.tree = Tree(self.query_id, self.seed, self.question_tokens)
        self.algorithm = make_algorithm(self.tree, self.config)
        self._program = self.algorithm.run()
        self._need: Need | None = None
        self._requested: set[str] = set()
        self._unscored: set[str] = set()  # generated or requested, reward not yet known
        self._program_done = False

    # ------------------------------------------------------------------ events
    def start(self, now_s: float) -> list[Command]:
        self.started_s = now_s
        return self._resume(now_s, first=True)

    def on_generated(
        self, node_id: str, text: str, tokens: int, finish_reason: str, mean_logprob: float, now_s: float
    ) -> list[Command]:
        node = self.tree.nodes[node_id]
        if node.generated or node_id not in self._requested:
            return []  # a duplicate delivery: the first result wins
        node.generated = True
        node.text, node.tokens, node.finish_reason = text, tokens, finish_reason
        node.mean_logprob = mean_logprob
        node.answer = extract_answer(text)
        parent = node.parent
        node.cum_tokens = tokens + (parent.cum_tokens if parent is not None else 0)
        self.stats.nodes_generated += 1
        self.stats.tokens_generated += tokens
        commands: list[Command] = []
        if self.reward == "logprob":
            self._set_reward(node, _logprob_reward(mean_logprob))
            self._unscored.discard(node.id)
        else:
            commands.append(ScoreCommand(node, prompt_segments(node)))
        commands.extend(self._resume(now_s))
        return commands

    def on_scored(self, node_id: str, reward: float, now_s: float) -> list[Command]:
        node = self.tree.nodes[node_id]
        if node.scored or not node.generated:
            return []
        self._set_reward(node, reward)
        self._unscored.discard(node.id)
        return self._resume(now_s)

    # ------------------------------------------------------------------ internals
    def _set_reward(self, node: Node, reward: float) -> None:
        node.reward = reward
        self.stats.nodes_scored += 1

    def _satisfied(self, need: Need) -> bool:
        if need.scored:
            return all(n.scored for n in need.nodes)
        return all(n.generated for n in need.nodes)

    def _resume(self, now_s: float, first: bool = False) -> list[Command]:
        if self.done:
            return []
        commands: list[Command] = []
        while not self._program_done and (first or (self._need is not None and self._satisfied(self._need))):
            first = False
            try:
                self._need = next(self._program)
            except StopIteration as stop:
                self.solutions = list(stop.value or [])
                self._program_done = True
                break
            for node in self._need.nodes:
                if node.id not in self._requested:
                    self._requested.add(node.id)
                    self._unscored.add(node.id)
                    assert node.parent is not None
                    commands.append(
                        GenerateCommand(node, prompt_segments(node.parent), self.config.max_step_tokens)
                    )
        # The query ends once the program has returned and every node it asked for is scored,
        # so the final tree never depends on which scores happened to arrive first.
        if self._program_done and not self._unscored:
            self.answer = select_answer(self.solutions, self.algorithm.answer_selection)
            self.done, self.finished_s = True, now_s
            commands.append(FinishCommand(self.query_id, self.answer))
        return commands


def _logprob_reward(mean_logprob: float) -> float:
    """The logprob reward: the geometric-mean token probability, in (0, 1]."""
    import math

    return math.exp(min(0.0, mean_logprob))
