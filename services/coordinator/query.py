"""A query a coordinator holds: its request, its machine and where its inbox stands; how its
machine is built, what the allocator hears of it, and its answer graded."""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field
from typing import cast

from opentelemetry.trace import Span
from structlog.typing import FilteringBoundLogger

from spex.proto import QueryStatsEvent, SubmitQuestionRequest, submission
from spex.proto.messages import AnswerSelection
from spex.shared.content.grading import equivalent, grade
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES, SearchConfig
from spex.shared.core.search.base import parameter_defaults
from spex.shared.core.spec.early_stop import EarlyStop
from spex.shared.core.speculation import SpecPolicy, predictor_factory
from spex.shared.core.view import TreeWatch
from spex.shared.runtime.settings import Settings

__all__ = [
    "LOCAL_SHARE",
    "HeldQuery",
    "Phase",
    "Unpublishable",
    "graded",
    "new_machine",
    "search_params",
    "stats",
]

LOCAL_SHARE = 4  # speculative jobs per query when no allocator publishes a share
MAX_OFFERS = 64  # new speculative candidates a query offers the allocator per report


class Phase(enum.Enum):
    """Where a held query stands (`holdings` names the transitions; a query being adopted is
    not held yet: `Holdings.busy` tells it apart)."""

    REPLAYING = "replaying"  # its inbox is applied to a fresh machine
    LIVE = "live"  # the live inbox reader applies its new entries


@dataclass
class HeldQuery:
    request: SubmitQuestionRequest
    machine: QueryMachine
    epoch: int  # the fencing epoch of our lease
    last_id: str = "0"  # the last inbox entry applied
    started_wall: float = 0.0  # monotonic time it was adopted (the answer's latency)
    renewed: float = 0.0  # monotonic time the lease was last confirmed
    phase: Phase = Phase.REPLAYING
    watch: TreeWatch = field(default_factory=TreeWatch)  # what watchers were last sent of its tree
    tree_sent: float = -1e9  # monotonic time its tree changes were last sent
    tree_due: bool = False  # changes wait to be sent
    counted: tuple[int, ...] = ()  # its stats last added to the metrics (`observe.COUNTED`)
    span: Span | None = None  # its OpenTelemetry span while we hold it

    @property
    def query_id(self) -> str:
        return self.request.query_id

    @property
    def replaying(self) -> bool:
        """Not live yet: the live inbox reader leaves it alone."""
        return self.phase is not Phase.LIVE

    @property
    def speculates(self) -> bool:
        return self.machine.speculation.enabled


def new_machine(req: SubmitQuestionRequest, settings: Settings) -> QueryMachine:
    speculate = req.mode == "spex"
    search = SearchConfig(
        req.algorithm,
        req.target,
        answer_selection=cast("AnswerSelection | None", req.answer_selection or None),  # validate checked it
        max_step_tokens=settings.max_step_tokens,
        params=search_params(req, settings),
    )
    return QueryMachine(
        req.query_id,
        req.prompt_tokens or submission.estimate_tokens(req.question),
        search,
        req.seed,
        reward=settings.step_reward,
        speculation=SpecPolicy(enabled=speculate),
        early_stop=EarlyStop(
            req.early_stop,
            req.early_stop_alpha,
            req.early_stop_min_answers or None,
            weight=req.early_stop_weight,
        ),
        share=LOCAL_SHARE if speculate else 0,
        same_answer=equivalent if settings.content == "real" else None,  # 0.5 and \frac12 vote together
        tree_key=req.twin_of,
        predictor=predictor_factory(settings.predictor),
    )


def search_params(req: SubmitQuestionRequest, settings: Settings) -> dict[str, float | str]:
    """The question's parameters, and the operator's SPEX_MAX_DEPTH over its `max_depth` for a
    search that takes one (a search without one is not bounded by it)."""
    search = SEARCHES.get(req.algorithm)  # None: unknown here (`make_algorithm` says so)
    takes_depth = search is not None and "max_depth" in parameter_defaults(search)
    depth = {"max_depth": float(settings.max_depth)} if settings.max_depth and takes_depth else {}
    return {**req.params, **depth}


def stats(query: HeldQuery, worker: str) -> QueryStatsEvent:
    """What the budget allocator needs of a speculating query: its speculative jobs' and
    candidates' values, its context, its load."""
    m = query.machine
    running, offers = m.spec_offers(MAX_OFFERS)
    return QueryStatsEvent(
        msg_id=f"stats/{query.query_id}/{time.monotonic_ns()}",
        query_id=query.query_id,
        running=[round(p, 4) for p in running],
        offers=[round(p, 4) for p in offers],
        offer_prompts=m.spec_prompts(MAX_OFFERS),
        step_tokens=round(m.step_tokens, 1),
        algorithm=m.config.algorithm,
        prefix_tokens=m.context_tokens,
        active_jobs=m.jobs_in_flight,
        worker=worker,
    )


async def graded(
    answer: str | None, reference: str, limit_s: float, log: FilteringBoundLogger
) -> bool | None:
    """math-verify in a worker thread, so a slow parse never stalls the leases; None when
    there is no reference, or grading took longer than `limit_s`."""
    if not reference:
        return None
    try:
        return await asyncio.wait_for(asyncio.to_thread(grade, answer, reference), limit_s)
    except TimeoutError:
        log.warning("grading_timed_out", reference=reference[:80])
        return None


class Unpublishable(Exception):
    """A command whose message cannot be encoded (over the size limit): the query fails."""
