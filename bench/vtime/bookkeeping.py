"""Engine bookkeeping of the virtual-time driver: what each engine request is, by a typed id
built in one place (`RequestId`), and the primary load T2 budgets by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["EngineBook", "GenJob", "RequestId", "ScoreJob"]


@dataclass(frozen=True)
class RequestId:
    """An engine request: the generation job `key` of a query, or the score of node `key`.
    Its text (`str`) is the engine's request id; the driver never parses it back."""

    kind: Literal["gen", "score"]
    query_id: str
    key: str  # the job id of a generation, the node id of a score

    def __str__(self) -> str:
        return f"{self.kind[0]}:{self.query_id}:{self.key}"


@dataclass
class GenJob:
    rid: RequestId
    node_id: str
    path: list[str]  # node ids below the root, the node last
    primary: bool
    prompt_tokens: int = 0
    cancelled_s: float | None = None
    promoted: bool = False  # a speculative job the search adopted (not a primary for TPOT)

    @property
    def job_id(self) -> str:
        return self.rid.key


@dataclass(frozen=True)
class ScoreJob:
    rid: RequestId
    path: list[str]  # node ids below the root, the scored node last


class EngineBook:
    """The generation jobs and score requests on the engines, by engine request id."""

    def __init__(self) -> None:
        self.jobs: dict[str, GenJob] = {}
        self.scores: dict[str, ScoreJob] = {}
        self.primary_in_flight = 0
        self.primary_ctx = 0  # summed prompt tokens of primary jobs in flight

    def add_job(self, job: GenJob) -> None:
        self.jobs[str(job.rid)] = job
        if job.primary:
            self._count_primary(job, +1)

    def pop_job(self, rid: str) -> GenJob:
        job = self.jobs.pop(rid)
        if job.primary:
            self._count_primary(job, -1)
        return job

    def job(self, rid: RequestId) -> GenJob | None:
        return self.jobs.get(str(rid))

    def promote(self, job: GenJob) -> None:
        """The search waits on speculative `job` now: it counts as primary load."""
        if not job.primary:
            job.primary = job.promoted = True
            self._count_primary(job, +1)

    @property
    def speculative_jobs(self) -> int:
        return sum(1 for j in self.jobs.values() if not j.primary)

    def add_score(self, score: ScoreJob) -> bool:
        """False if the same node's score is already on the engine."""
        rid = str(score.rid)
        if rid in self.scores:
            return False
        self.scores[rid] = score
        return True

    def pop_score(self, rid: str) -> ScoreJob:
        return self.scores.pop(rid)

    def _count_primary(self, job: GenJob, sign: int) -> None:
        self.primary_in_flight += sign
        self.primary_ctx += sign * job.prompt_tokens
