"""The speculation half of a query's state machine (`machine.QueryMachine` is one of these):
the view a predictor sees of the query (`SpecView`), what T2 weighs of it, and T1's
housekeeping — speculative jobs issued up to the query's share, cancelled once the search can
no longer use them, held to the amplification cap.

A speculative job's generation is issued like the search's own (`_generate`), with the
prediction's distance and prior recorded: the query's calibration (hits over what the priors
expected) scales the value of its offers. Split from the machine as SGLang splits its
scheduler (a class of mixins, one per concern): it holds no state of its own; the machine's
fields it reads are declared here for the type checker.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spex.proto.messages import PRIMARY, SPECULATIVE
from spex.shared.core.commands import CancelCommand, Command, GenerateCommand, prompt_segments
from spex.shared.core.search import SearchConfig
from spex.shared.core.search.base import SearchAlgorithm
from spex.shared.core.speculation import Predictor, SpecCache, SpecPolicy, spec_priority
from spex.shared.core.tree import EXPAND, Node, Tree

if TYPE_CHECKING:
    from spex.shared.core.machine import QueryStats

__all__ = ["JobInFlight", "MachineSpeculation"]


@dataclass
class JobInFlight:
    """A generation in flight: the search's own, or speculation's (until the search adopts it)."""

    job_id: str
    speculative: bool
    adopted: bool = False
    distance: int = 0  # how far ahead the prediction reached (algorithm-defined)
    prior: float = 0.0  # the predictor's probability that the search asks for it


class MachineSpeculation:
    """T1 and what T2 reads, over the fields of `QueryMachine`."""

    config: SearchConfig
    speculation: SpecPolicy
    share: int
    stats: QueryStats
    tree: Tree
    done: bool
    algorithm: SearchAlgorithm
    _predictor: Predictor
    _cache: SpecCache
    _jobs: dict[str, JobInFlight]  # node id -> its generation in flight
    _attempts: dict[str, int]
    _job_scope: str  # what makes this query's job ids its own (`QueryMachine.__post_init__`)
    _spec_failed: set[str]
    _stop_with: str | None
    _predicted: tuple[int, list[Node]] | None
    _settled: bool
    _priors: dict[str, float]
    _prior_sum: float
    _extended: set[str]  # nodes a job of one of whose children was issued: their step is cached
    events: int  # the version of what the query knows (`SpecView.events`)

    # ------------------------------------------------------------------ the SpecView
    def child(self, parent: Node, index: int, action: str = EXPAND) -> Node:
        node = self.tree.nodes.get(parent.child_id(index, action))
        return node if node is not None else self._cache.handle(parent, index, action)

    def busy(self, node: Node) -> bool:
        return node.id in self._jobs

    # ------------------------------------------------------------------ what T2 weighs
    @property
    def spec_in_flight(self) -> int:
        return sum(1 for j in self._jobs.values() if j.speculative and not j.adopted)

    def spec_offers(self, limit: int, sharing: int = 1) -> tuple[list[float], list[float]]:
        """What T2 weighs: the value of each of this query's speculative jobs in flight, and of
        each of up to `limit` new candidates (in the predictor's order) — the probability that
        the search uses it (the predictor's prior times `calibration`) times what a use saves
        on an engine `sharing` queries share (`spec_saving`)."""
        if not self.speculation.enabled or self.done:
            return [], []
        c, saving = self.calibration, self.algorithm.spec_saving(sharing)
        running = [
            min(1.0, job.prior * c) * saving
            for job in self._jobs.values()
            if job.speculative and not job.adopted
        ]
        new = [
            min(1.0, self._predictor.spec_likelihood(n) * c) * saving for n in self._predict(max(0, limit))
        ]
        return running, new

    def spec_prompts(self, limit: int) -> list[int]:
        """The prompt tokens each of the candidates `spec_offers` names (the same `limit`) must
        compute before it decodes: its parent's step, unless a job of another child of that
        parent was issued already (the engine's prefix cache holds the step then)."""
        if not self.speculation.enabled or self.done:
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
        pending = [n for n, j in self._jobs.items() if j.speculative and not j.adopted]
        pending += [h.id for h in self._cache if h.generated and h.id not in self._jobs]
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
        out = self._predictor.predict(self, k)
        self._predicted = (k, out)
        return out[:]

    def speculative(self) -> Iterator[Node]:
        """The speculative nodes held now (generated or in flight), not yet asked for."""
        return iter(self._cache)

    # ------------------------------------------------------------------ issuing
    def _generate(self, node: Node, priority: int) -> GenerateCommand:
        attempt = self._attempts.get(node.id, 0)
        self._attempts[node.id] = attempt + 1
        job = JobInFlight(f"{node.id}.{attempt}{self._job_scope}", speculative=priority != PRIMARY)
        if job.speculative:
            job.distance = self._predictor.spec_distance(node)
            job.prior = min(1.0, max(0.0, self._predictor.spec_likelihood(node)))
            self._priors[node.id] = job.prior
            self._prior_sum += job.prior
            self.stats.spec_by_distance.setdefault(job.distance, [0, 0])[0] += 1
            priority = spec_priority(job.distance)
        self._jobs[node.id] = job
        self._predicted = None
        assert node.parent is not None and node.parent.generated
        self._extended.add(node.parent.id)
        return GenerateCommand(
            job.job_id, node, prompt_segments(node.parent), self.config.max_step_tokens, priority
        )

    def _count_hit(self, distance: int) -> None:
        self.stats.spec_adopted += 1
        self.stats.spec_by_distance[distance][1] += 1

    # ------------------------------------------------------------------ housekeeping
    def _cancel_speculation(self) -> list[Command]:
        """Cancel every speculative job the search has not adopted (T3 stopped it)."""
        dead = {node: j for node, j in self._jobs.items() if j.speculative and not j.adopted}
        for node in dead:
            del self._jobs[node]
        self.stats.spec_cancelled += len(dead)
        return [CancelCommand(j.job_id) for j in dead.values()]

    def _housekeeping(self, now_s: float) -> list[Command]:
        """Cancel speculation the search can no longer use, bound the cache, and issue new
        speculative jobs up to this query's share."""
        if self.done or not self.speculation.enabled or self._stop_with is not None:
            return []
        commands: list[Command] = []
        dead = self._cache.prune(lambda n: n in self._jobs, self._predictor.spec_alive)
        for node_id in dead:
            job = self._jobs.get(node_id)
            if job is not None and not job.adopted:
                del self._jobs[node_id]
                self.stats.spec_cancelled += 1
                commands.append(CancelCommand(job.job_id))
        evicted = self._cache.evict()
        self.stats.spec_evicted += evicted
        if dead or evicted:
            self._predicted = None
        free = self.share - self.spec_in_flight
        if free > 0:
            for node in self._predict(free):
                if node.id in self._jobs or node.generated or node.id in self._spec_failed:
                    continue
                if self._over_amplification():
                    break
                self.stats.spec_issued += 1
                if node.id not in self.tree.nodes:
                    self._cache.keep(node)  # a remembered prediction pruned as never issued
                commands.append(self._generate(node, SPECULATIVE))
        self._settled = True
        return commands

    def _over_amplification(self) -> bool:
        """Would one more speculative job push generated/consumed tokens past the cap, if every
        speculative job in flight (and the new one) turned out to be waste?"""
        cap = self.speculation.max_amplification
        if cap is None:
            return False
        consumed = max(1, self.stats.tokens_generated)
        wasted = self.stats.spec_tokens - self.stats.spec_tokens_consumed
        projected = consumed + wasted + (self.spec_in_flight + 1) * self.step_tokens
        return projected / consumed > cap
