"""T1 for one query (`Speculator`): the generations it has in flight, the view a predictor
sees of it (`SpecView`), what T2 weighs of it, and its housekeeping — speculative jobs issued
up to the query's share, cancelled once the search can no longer use them, held to the
amplification cap.

A speculative job's generation is issued like the search's own (`generate`), with the
prediction's distance and prior recorded: the query's calibration (hits over what the priors
expected) scales the value of its offers. The query's state machine (`machine.QueryMachine`)
owns one and calls it, as vLLM's engine core calls its scheduler: the speculator owns the jobs,
the speculative cache and the memo of the last prediction; the machine owns the search.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from spex.proto.messages import PRIMARY, SPECULATIVE
from spex.shared.core.commands import CancelCommand, Command, GenerateCommand, prompt_segments
from spex.shared.core.search import SearchConfig
from spex.shared.core.search.base import SearchAlgorithm
from spex.shared.core.speculation import Predictor, SpecCache, SpecPolicy, spec_priority
from spex.shared.core.tree import EXPAND, Node, Tree

__all__ = ["JobInFlight", "QueryStats", "Speculator"]


@dataclass
class QueryStats:
    nodes_generated: int = 0  # nodes of the final tree (the search's own work)
    tokens_generated: int = 0
    spec_issued: int = 0
    spec_adopted: int = 0  # speculative jobs the search asked for (hits)
    spec_cancelled: int = 0
    spec_evicted: int = 0
    spec_tokens: int = 0  # tokens of completed speculative jobs
    spec_tokens_consumed: int = 0  # of those, tokens of jobs the search adopted
    spec_by_distance: dict[int, list[int]] = field(default_factory=dict)  # distance -> [issued, adopted]


@dataclass
class JobInFlight:
    """A generation in flight: the search's own, or speculation's (until the search adopts it)."""

    job_id: str
    speculative: bool
    adopted: bool = False
    distance: int = 0  # how far ahead the prediction reached (algorithm-defined)
    prior: float = 0.0  # the predictor's probability that the search asks for it


class Speculator:
    """One query's generations in flight and its speculation (T1), over its tree.

    `job_scope` is what makes the query's job ids its own (`QueryMachine.__post_init__`);
    `stats` is the query's counters, which the speculator adds its own to."""

    def __init__(
        self,
        tree: Tree,
        algorithm: SearchAlgorithm,
        config: SearchConfig,
        policy: SpecPolicy,
        predictor: Predictor,
        stats: QueryStats,
        job_scope: str = "",
    ) -> None:
        self.tree, self.algorithm, self.config, self.policy = tree, algorithm, config, policy
        self.predictor, self.stats, self.job_scope = predictor, stats, job_scope
        self.cache = SpecCache(tree.seed, policy.cache_nodes)
        self.jobs: dict[str, JobInFlight] = {}  # node id -> its generation in flight
        self._attempts: dict[str, int] = {}
        self.failed: set[str] = set()  # speculative nodes a service gave up on: not retried
        self._predicted: tuple[int, list[Node]] | None = None  # (k, the prediction) until a change
        self.settled = False  # housekeeping ran after the last event (a repeat would do nothing)
        self.events = 0  # events that changed the query's state (a version for its readers)
        self._priors: dict[str, float] = {}  # speculative node issued -> its prior
        self._prior_sum = 0.0  # Σ prior of every speculative job issued
        self._extended: set[str] = set()  # nodes whose step a job of one of their children has in its prompt

    # ------------------------------------------------------------------ the SpecView
    def child(self, parent: Node, index: int, action: str = EXPAND) -> Node:
        node = self.tree.nodes.get(parent.child_id(index, action))
        return node if node is not None else self.cache.handle(parent, index, action)

    def busy(self, node: Node) -> bool:
        return node.id in self.jobs

    def changed(self) -> None:
        """An event changed the query: forget the remembered prediction, let housekeeping run
        again, and move the version its readers compare."""
        self._predicted, self.settled = None, False
        self.events += 1

    # ------------------------------------------------------------------ what T2 weighs
    @property
    def in_flight(self) -> int:
        return sum(1 for j in self.jobs.values() if j.speculative and not j.adopted)

    def offers(self, limit: int, sharing: int = 1) -> tuple[list[float], list[float]]:
        """What T2 weighs: the value of each of this query's speculative jobs in flight, and of
        each of up to `limit` new candidates (in the predictor's order) — the probability that
        the search uses it (the predictor's prior times `calibration`) times what a use saves
        on an engine `sharing` queries share (`spec_saving`)."""
        if not self.policy.enabled:
            return [], []
        c, saving = self.calibration, self.algorithm.spec_saving(sharing)
        running = [
            min(1.0, job.prior * c) * saving
            for job in self.jobs.values()
            if job.speculative and not job.adopted
        ]
        new = [min(1.0, self.predictor.spec_likelihood(n) * c) * saving for n in self._predict(max(0, limit))]
        return running, new

    def prompts(self, limit: int) -> list[int]:
        """The prompt tokens each of the candidates `offers` names (the same `limit`) must
        compute before it decodes: its parent's step, unless a job of another child of that
        parent was issued already (the engine's prefix cache holds the step then)."""
        if not self.policy.enabled:
            return []
        return [0 if n.parent is None or n.parent.id in self._extended else n.parent.tokens
                for n in self._predict(max(0, limit))]  # fmt: skip

    @property
    def step_tokens(self) -> float:
        """The tokens a step of this query takes, so far (half the cap before its first)."""
        nodes = self.stats.nodes_generated
        return self.stats.tokens_generated / nodes if nodes else self.config.max_step_tokens / 2

    @property
    def calibration(self) -> float:
        """The query's measured hits over what the priors of its decided speculative jobs
        expected (a job still in flight, or generated and waiting in the cache, is not decided
        yet), with one expected hit of prior weight: 1 until the query has evidence."""
        # In a fixed order (a set's would vary by process, and a float sum with it).
        pending = [n for n, j in self.jobs.items() if j.speculative and not j.adopted]
        pending += [h.id for h in self.cache if h.generated and h.id not in self.jobs]
        expected = self._prior_sum - sum(self._priors.get(n, 0.0) for n in pending)
        return (self.stats.spec_adopted + 1.0) / (max(0.0, expected) + 1.0)

    def _predict(self, k: int) -> list[Node]:
        """The predictor's `k` likeliest nodes, remembered until the query's state changes
        (every event, every job issued): T2 asks each query for its candidates whenever any
        query's budget changes, mostly of queries nothing happened to. A prediction of k
        nodes is the first k of a longer one, so the longest asked serves shorter asks."""
        memo = self._predicted
        if memo is not None and (k <= memo[0] or len(memo[1]) < memo[0]):
            return memo[1][:k]
        out = self.predictor.predict(self, k)
        self._predicted = (k, out)
        return out[:]

    def speculative(self) -> Iterator[Node]:
        """The speculative nodes held now (generated or in flight), not yet asked for."""
        return iter(self.cache)

    # ------------------------------------------------------------------ issuing
    def generate(self, node: Node, priority: int) -> GenerateCommand:
        attempt = self._attempts.get(node.id, 0)
        self._attempts[node.id] = attempt + 1
        job = JobInFlight(f"{node.id}.{attempt}{self.job_scope}", speculative=priority != PRIMARY)
        if job.speculative:
            job.distance = self.predictor.spec_distance(node)
            job.prior = min(1.0, max(0.0, self.predictor.spec_likelihood(node)))
            self._priors[node.id] = job.prior
            self._prior_sum += job.prior
            self.stats.spec_by_distance.setdefault(job.distance, [0, 0])[0] += 1
            priority = spec_priority(job.distance)
        self.jobs[node.id] = job
        self._predicted = None
        assert node.parent is not None and node.parent.generated
        self._extended.add(node.parent.id)
        return GenerateCommand(
            job.job_id, node, prompt_segments(node.parent), self.config.max_step_tokens, priority
        )

    def count_hit(self, distance: int) -> None:
        self.stats.spec_adopted += 1
        self.stats.spec_by_distance[distance][1] += 1

    # ------------------------------------------------------------------ housekeeping
    def cancel_speculation(self) -> list[Command]:
        """Cancel every speculative job the search has not adopted (T3 stopped it)."""
        dead = {node: j for node, j in self.jobs.items() if j.speculative and not j.adopted}
        for node in dead:
            del self.jobs[node]
        self.stats.spec_cancelled += len(dead)
        return [CancelCommand(j.job_id) for j in dead.values()]

    def drop_failed(self, node_id: str, generating: bool) -> None:
        """A service gave up on speculative `node_id` the search has not asked for: drop its
        job (a generation's; a score's is the machine's) and its handle, and never issue it
        again (asked for later, it is generated and scored afresh)."""
        self.failed.add(node_id)
        if generating:
            del self.jobs[node_id]
        self.cache.drop(node_id)
        self.stats.spec_cancelled += 1

    def cancel_all(self) -> list[Command]:
        """The query finished: cancel every job in flight and forget the speculative cache."""
        cancels: list[Command] = [CancelCommand(j.job_id) for j in self.jobs.values()]
        self.stats.spec_cancelled += sum(1 for j in self.jobs.values() if j.speculative and not j.adopted)
        self.jobs.clear()
        self.cache.clear()
        return cancels

    def housekeeping(self, share: int) -> list[Command]:
        """Cancel speculation the search can no longer use, bound the cache, and issue new
        speculative jobs up to the query's `share`."""
        if not self.policy.enabled:
            return []
        commands: list[Command] = []
        dead = self.cache.prune(lambda n: n in self.jobs, self.predictor.spec_alive)
        for node_id in dead:
            job = self.jobs.get(node_id)
            if job is not None and not job.adopted:
                del self.jobs[node_id]
                self.stats.spec_cancelled += 1
                commands.append(CancelCommand(job.job_id))
        evicted = self.cache.evict()
        self.stats.spec_evicted += evicted
        if dead or evicted:
            self._predicted = None
        free = share - self.in_flight
        if free > 0:
            for node in self._predict(free):
                if node.id in self.jobs or node.generated or node.id in self.failed:
                    continue
                if self._over_amplification():
                    break
                self.stats.spec_issued += 1
                if node.id not in self.tree.nodes:
                    self.cache.keep(node)  # a remembered prediction pruned as never issued
                commands.append(self.generate(node, SPECULATIVE))
        self.settled = True
        return commands

    def _over_amplification(self) -> bool:
        """Would one more speculative job push generated/consumed tokens past the cap, if every
        speculative job in flight (and the new one) turned out to be waste?"""
        cap = self.policy.max_amplification
        if cap is None:
            return False
        consumed = max(1, self.stats.tokens_generated)
        wasted = self.stats.spec_tokens - self.stats.spec_tokens_consumed
        projected = consumed + wasted + (self.in_flight + 1) * self.step_tokens
        return projected / consumed > cap
