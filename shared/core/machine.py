"""The sans-IO brain of the tree coordinator: one state machine per query.

It takes events (node generated, node scored, job cancelled, budget changed) and returns
commands (`spex.shared.core.commands`); it never touches Redis, asyncio or a clock — time
arrives as an argument. The virtual-time driver (`spex.bench.vtime`) and the coordinator
service are thin drivers around it.

The search algorithm is a program (`spex.shared.core.search.base`) that yields `Need`
requests; the machine turns each needed node into a generate command, scores every generated
node, and resumes the program once its request is satisfied.

Speculation (T1) lives here and only here, apart from the algorithms (the machine's
`machine_spec.Speculator` owns it): after every event the
machine asks its predictor (`spex.shared.core.speculation`) for nodes the search will likely
need, and generates them at low priority as speculative handles in its `SpecCache`. When the
search asks for a node whose handle is generated, the result is served from that cache; if
it is in flight, the job is adopted and promoted. The search never sees a speculative result
it did not ask for, and every result is a pure function of node identity, so with early
termination off the tree and answer are exactly the baseline's (the lossless promise). BFS
misses are cancelled as soon as the search decides their parent's width (`spec_alive`); DFS
misses stay cached, at most `cache_nodes` per query, oldest dropped first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from spex.proto.messages import PRIMARY, REWARDS, SPECULATIVE, FinishReason, JobKind, NodeFinishReason, Reward
from spex.shared.core.commands import Command, FinishCommand, PromoteCommand, ScoreCommand, prompt_segments
from spex.shared.core.ids import digest
from spex.shared.core.machine_spec import QueryStats, Speculator
from spex.shared.core.search import Need, SearchConfig, make_algorithm
from spex.shared.core.search.answers import Equivalence, extract_answer, normalize_answer, select_answer
from spex.shared.core.spec.early_stop import EarlyStop, answer_weight, should_stop
from spex.shared.core.speculation import PredictorFactory, SpecPolicy, auto_predictor
from spex.shared.core.tree import Node, Tree

__all__ = ["REWARDS", "QueryMachine", "QueryStats", "Reward"]


@dataclass
class QueryMachine:
    query_id: str
    question_tokens: int
    config: SearchConfig
    seed: int
    reward: Reward = "prm"
    speculation: SpecPolicy = field(default_factory=SpecPolicy)
    early_stop: EarlyStop = field(default_factory=EarlyStop)
    share: int = 0  # speculative jobs this query may have in flight (set by the T2 allocator)
    predictor: PredictorFactory = auto_predictor
    same_answer: Equivalence | None = None  # answers vote together when equivalent (else by spelling)
    tree_key: str = ""  # whose tree this grows ("": its own id; a baseline twin's: its original's)
    tree: Tree = field(init=False)
    stats: QueryStats = field(default_factory=QueryStats)
    done: bool = False
    early_stopped: bool = False
    cancelled: bool = False
    answer: str | None = None
    error: str = ""  # why the query failed: a job it waited on was given up on
    solutions: list[Node] = field(default_factory=list)
    started_s: float = 0.0
    finished_s: float = 0.0

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, not {self.reward!r}")
        self.tree = Tree(self.tree_key or self.query_id, self.seed, self.question_tokens)
        self.algorithm = make_algorithm(self.tree, self.config)
        # A job id names its node (and a generation's attempt); a node id already names its
        # query, unless this query grows another's tree (a baseline twin's nodes are its
        # original's): then its jobs, generations and scores, carry its own id's hash, or the
        # two queries' jobs would be taken for one another.
        self._job_scope = f"@{digest(self.query_id)[:8]}" if self.tree_key else ""
        self.spec = Speculator(
            self.tree,
            self.algorithm,
            self.config,
            self.speculation,
            self.predictor(self.algorithm),
            self.stats,
            self._job_scope,
        )
        self._program = self.algorithm.run()
        self._need: Need | None = None
        self._requested: set[str] = set()  # tree nodes the search asked for
        self._unscored: set[str] = set()  # ... whose reward is not known yet
        self._program_done = False
        self._scoring: set[str] = set()
        self._stop_with: str | None = None  # T3's leading answer once it stopped the search
        self.context_tokens = self.question_tokens  # S_KV(q): prefix of the newest search node
        self.adopted: set[str] = set()  # tree nodes the search got from speculation (hits)

    def solution_steps(self) -> list[str]:
        """The steps of the highest-reward solution that gives the chosen answer; with no answer,
        of the deepest, then highest-reward, step the search reached (to show what it wrote)."""
        answer = self.answer
        chosen = [n for n in self.solutions if n.answer is not None and normalize_answer(n.answer) == answer]
        if answer is not None and chosen:
            return [n.text for n in max(chosen, key=lambda n: n.reward or 0.0).path()]
        reached = [n for n in self.tree if n.parent is not None and n.generated]
        if not reached:
            return []
        return [n.text for n in max(reached, key=lambda n: (n.depth, n.reward or 0.0)).path()]

    # ------------------------------------------------------------------ what its readers see
    @property
    def events(self) -> int:
        """Events that changed the query's state (a version for its readers)."""
        return self.spec.events

    def busy(self, node: Node) -> bool:
        """A generation of `node` is in flight."""
        return self.spec.busy(node)

    def speculative(self) -> Iterator[Node]:
        """The speculative nodes held now (generated or in flight), not yet asked for."""
        return self.spec.speculative()

    def spec_offers(self, limit: int, sharing: int = 1) -> tuple[list[float], list[float]]:
        """What T2 weighs of this query (`Speculator.offers`); a finished query offers nothing."""
        return ([], []) if self.done else self.spec.offers(limit, sharing)

    def spec_prompts(self, limit: int) -> list[int]:
        """The prompt tokens of the candidates `spec_offers` names (`Speculator.prompts`)."""
        return [] if self.done else self.spec.prompts(limit)

    @property
    def step_tokens(self) -> float:
        return self.spec.step_tokens

    @property
    def calibration(self) -> float:
        return self.spec.calibration

    @property
    def jobs_in_flight(self) -> int:
        return len(self.spec.jobs)

    def waiting_on(self) -> tuple[str, list[str]] | None:
        """What the search is blocked on now: ("generate", node ids) or ("score", node ids)."""
        need = self._need
        if self.done or need is None or self._program_done or self._satisfied(need):
            return None
        ungenerated = [n.id for n in need.nodes if not n.generated]
        if ungenerated:
            return "generate", ungenerated
        return "score", [n.id for n in need.nodes if not n.scored]

    def job_of(self, node_id: str) -> tuple[str, bool] | None:
        """(job id, adopted from speculation) of the generation of `node_id` in flight."""
        job = self.spec.jobs.get(node_id)
        return (job.job_id, job.speculative) if job is not None else None

    # ------------------------------------------------------------------ events
    def start(self, now_s: float) -> list[Command]:
        self._changed()
        self.started_s = now_s
        commands = self._resume(now_s, first=True)
        return commands + self._housekeeping(now_s)

    def on_generated(
        self,
        job_id: str,
        node_id: str,
        text: str,
        tokens: int,
        finish_reason: FinishReason,
        mean_logprob: float,
        now_s: float,
    ) -> list[Command]:
        job = self.spec.jobs.get(node_id)
        if job is None or job.job_id != job_id or self.done:
            return []  # stale (cancelled or superseded) or duplicate: the first result wins
        del self.spec.jobs[node_id]
        self._changed()
        if job.speculative and not job.adopted:
            self.spec.cache.finished(node_id, job.distance)
        real = node_id in self._requested
        node = self.tree.nodes[node_id] if real else self.spec.cache.get(node_id)
        if node is None:
            return []
        self._fill(node, text, tokens, finish_reason, mean_logprob)
        if job.speculative:
            self.stats.spec_tokens += tokens
            if job.adopted:
                self.stats.spec_tokens_consumed += tokens
        if real:
            self.stats.nodes_generated += 1
            self.stats.tokens_generated += tokens
            self.context_tokens = self.question_tokens + node.cum_tokens
        commands: list[Command] = []
        if self.reward == "logprob":
            self._scored(node, _logprob_reward(mean_logprob))
        else:
            self._scoring.add(node_id)
            commands.append(ScoreCommand(node, prompt_segments(node), PRIMARY if real else SPECULATIVE))
        commands.extend(self._resume(now_s))
        commands.extend(self._housekeeping(now_s))
        return commands

    def score_job_id(self, node_id: str) -> str:
        """The id of the job that scores node `node_id` (one per node: a score is not retried)."""
        return f"{node_id}{self._job_scope}"

    def on_scored(self, node_id: str, reward: float, now_s: float) -> list[Command]:
        if node_id not in self._scoring or self.done:
            return []
        self._scoring.discard(node_id)
        self._changed()
        node = self.tree.nodes[node_id] if node_id in self._requested else self.spec.cache.get(node_id)
        if node is None or not node.generated:
            return []
        self._scored(node, reward)
        return self._resume(now_s) + self._housekeeping(now_s)

    def on_failed(self, job_id: str, node_id: str, kind: JobKind, reason: str, now_s: float) -> list[Command]:
        """A service gave up on a job (its engine refused it, or it kept failing). A speculative
        job the search has not asked for is dropped (and not issued again); a job the search
        waits on fails the query — retrying it would fail the same way, and a search with a
        hole in its tree is not the search asked for; a stale one is ignored."""
        if self.done:
            return []
        tracked = node_id in self._scoring if kind == "score" else self.job_of(node_id) is not None
        if not tracked or (kind != "score" and self.spec.jobs[node_id].job_id != job_id):
            return []
        self._changed()
        if node_id not in self._requested:  # speculation the search has not asked for: drop it
            if kind == "score":
                self._scoring.discard(node_id)
            self.spec.drop_failed(node_id, generating=kind != "score")
            return self._housekeeping(now_s)
        self.error = f"{kind} job {job_id} failed: {reason}"
        return self._finish(now_s, None, early=False)

    def _changed(self) -> None:
        self.spec.changed()

    def on_cancelled(self, tokens: int) -> None:
        """A cancelled speculative job stopped after `tokens` tokens (all of them waste)."""
        self.stats.spec_tokens += tokens
        self.spec.settled = False  # the amplification cap may bind now

    def cancel(self, now_s: float) -> list[Command]:
        """The client cancelled the query: abort every job in flight, finish without an answer."""
        if self.done:
            return []
        self.cancelled = True
        return self._finish(now_s, None, early=False)

    def on_budget(self, share: int, now_s: float) -> list[Command]:
        """A new speculative share (jobs already in flight past it run to completion)."""
        if share == self.share and self.spec.settled:
            return []  # nothing changed since the last housekeeping: it would do nothing
        self.share = share
        return self._housekeeping(now_s)

    # ------------------------------------------------------------------ internals
    def _fill(
        self, node: Node, text: str, tokens: int, finish_reason: NodeFinishReason, mean_logprob: float
    ) -> None:
        node.generated = True
        node.text, node.tokens, node.finish_reason = text, tokens, finish_reason
        node.mean_logprob = mean_logprob
        node.answer = extract_answer(text)
        parent = node.parent
        node.cum_tokens = tokens + (parent.cum_tokens if parent is not None else 0)

    def _scored(self, node: Node, reward: float) -> None:
        node.reward = reward
        self._unscored.discard(node.id)

    def _satisfied(self, need: Need) -> bool:
        ready = [n.scored if need.scored else n.generated for n in need.nodes]
        return any(ready) or not ready if need.wait == "any" else all(ready)

    def _request(self, node: Node, commands: list[Command]) -> None:
        """The search asks for `node`: serve it from speculation, adopt a speculative job,
        or generate it."""
        self._requested.add(node.id)
        handle, distance = self.spec.cache.take(node.id)
        job = self.spec.jobs.get(node.id)
        if handle is not None and handle.generated:
            self.adopted.add(node.id)
            self.spec.count_hit(distance)
            self.stats.spec_tokens_consumed += handle.tokens
            self._fill(node, handle.text, handle.tokens, handle.finish_reason, handle.mean_logprob)
            self.stats.nodes_generated += 1
            self.stats.tokens_generated += handle.tokens
            if handle.scored:
                node.reward = handle.reward
            else:
                self._unscored.add(node.id)  # its score is in flight
            return
        self._unscored.add(node.id)
        if job is not None:
            job.adopted = True
            self.adopted.add(node.id)
            self.spec.count_hit(job.distance)
            commands.append(PromoteCommand(job.job_id))
            return
        commands.append(self.spec.generate(node, PRIMARY))

    def _resume(self, now_s: float, first: bool = False) -> list[Command]:
        if self.done:
            return []
        commands: list[Command] = []
        while not (self._program_done or self._stop_with is not None) and (
            first or (self._need is not None and self._satisfied(self._need))
        ):
            if self.early_stop.enabled and not first:
                # T3 decides between the search's steps, on every answer found so far once each
                # is weighed: never on whichever scores happened to come back first, so every
                # driver (virtual time, the pipeline, a restarted coordinator) stops at the same
                # step. Until then the search waits.
                if self._answers_unweighed():
                    break
                self._stop_with = self._check_early_stop()
                if self._stop_with is not None:
                    commands.extend(self.spec.cancel_speculation())  # what is left to score, it waits for
                    break
            first = False
            try:
                self._need = next(self._program)
            except StopIteration as stop:
                self.solutions = list(stop.value or [])
                self._program_done = True
                break
            for node in self._need.nodes:
                if node.id not in self._requested:
                    self._request(node, commands)
        # The query ends once the program has returned (or T3 stopped it) and every node it
        # asked for is scored, so the final tree never depends on which scores came first.
        if self._stop_with is not None and not self._unscored:
            commands.extend(self._finish(now_s, self._stop_with, early=True))
        elif self._program_done and not self._unscored:
            algorithm = self.algorithm
            answer = select_answer(
                self.solutions, algorithm.answer_selection, self.same_answer, algorithm.answer_weight
            )
            commands.extend(self._finish(now_s, answer, early=False))
        return commands

    def _answers_unweighed(self) -> bool:
        """An answer of the tree still waits for a score its T3 weight needs."""
        rule = self.early_stop.weight
        return any(n.answer is not None and answer_weight(n, rule) is None for n in self.tree if n.generated)

    def _check_early_stop(self) -> str | None:
        answers = [n for n in self.tree if n.generated and n.answer is not None]  # an EOS gives none
        family, rollouts = self.algorithm.family, self.algorithm.rollouts_done
        return should_stop(answers, self.config.target, self.early_stop, family, rollouts, self.same_answer)

    def _finish(self, now_s: float, answer: str | None, early: bool) -> list[Command]:
        self.answer, self.early_stopped = answer, early
        self.done, self.finished_s = True, now_s
        if early:
            self.solutions = [n for n in self.tree if n.terminal and n.scored]
        return [*self.spec.cancel_all(), FinishCommand(self.query_id, answer, early)]

    def _housekeeping(self, now_s: float) -> list[Command]:
        """The speculator's housekeeping, while the search runs on (`Speculator.housekeeping`)."""
        if self.done or self._stop_with is not None:
            return []
        return self.spec.housekeeping(self.share)


def _logprob_reward(mean_logprob: float) -> float:
    """The logprob reward: the geometric-mean token probability, in (0, 1]."""
    return math.exp(min(0.0, mean_logprob))
