"""Which speculative candidates one engine runs: the cost-aware admission controller.

Every query offers its speculative candidates, each with its value `p`: the probability that
its search will use it (`spex.shared.core.speculation`, calibrated by the query's measured
hits) times what a use saves (`SearchAlgorithm.spec_saving`), the context it decodes over and
the prompt tokens it must compute first (its parent's step, unless a sibling already had it
computed). The controller admits them in order of expected value (p) over marginal cost — what
one more sequence adds to a step on the engine's step curve (simulated roofline or measured,
batch × context) at its live load: its decode row every step, and its prompt rows once, spread
over the tokens it is expected to decode (on a CPU a prompt row costs about what a decode row
does, so a short step's prompt can cost more than its whole decode) — under one of two
objectives:

- `slo` (the serving default): admit while a decode step costs at most (1 + slack) × what
  the primary sequences alone cost, the slack a `TpotGovernor` steers so primary TPOT grows by
  its target. The room is the same as before; it now goes to the likeliest candidates first.
- `throughput`: admit while the expected useful tokens per second rise. A primary sequence
  yields a useful token a step, a candidate its value `p`; one more sequence is
  worth running while (worth + p) / step(n + 1) > worth / step(n). On a flat curve that fills
  to the knee; on a steep one it takes only likely candidates; with every primary waiting on a
  reward (worth 0) anything likely at all is worth the step.

Speculative jobs already running stay in the batch whatever is decided (a lower share never
cancels them), so they are counted first. Then each query's first candidate, likeliest first
(the per-query floor: no query that can speculate starves while the objective admits), then
the rest by value. A query's candidates are taken in its own order (its predictor's), so a
query's values are made non-increasing before they are merged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from spex.shared.roofline.capacity import StepCurve

__all__ = [
    "DEFAULT_STEP_TOKENS",
    "FLAT",
    "OBJECTIVES",
    "Admission",
    "Objective",
    "Offer",
    "admit",
    "divide",
    "even_split",
    "prompt_cost_s",
]

Objective = Literal["slo", "throughput"]
OBJECTIVES: tuple[Objective, ...] = get_args(Objective)


class _Flat:
    """A step that costs the same at any batch: an engine with no curve to budget by."""

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        return 1.0 if batch > 0 else 0.0

    def mixed_step_s(self, batch: int, ctx_sum: float, chunks: Sequence[tuple[float, float]]) -> float:
        return 1.0 if batch > 0 or chunks else 0.0


FLAT = _Flat()


DEFAULT_STEP_TOKENS = 64.0  # what a candidate is taken to decode when its query does not say


@dataclass(frozen=True)
class Offer:
    """One query's speculative candidates on an engine."""

    query_id: str
    running: tuple[float, ...]  # p of its speculative jobs in flight
    candidates: tuple[float, ...]  # p of the new ones its predictor offers, in its order
    context: float  # tokens each of its sequences decodes over
    # Prompt tokens each new candidate computes before it decodes (its prompt's uncached
    # tail), in the candidates' order; a missing entry is 0 (all cached).
    prompts: tuple[int, ...] = ()
    step_tokens: float = DEFAULT_STEP_TOKENS  # tokens a candidate is expected to decode


@dataclass
class Admission:
    shares: dict[str, int]  # speculative jobs each query may have in flight (running included)
    admitted: int  # new candidates admitted
    offered: int  # new candidates offered
    bound: str  # what stopped admission: "demand", "slack", "rate" or "limit"
    expected_useful: float = 0.0  # Σ p of the speculative jobs the engine will run


def admit(
    curve: StepCurve,
    primary: int,
    primary_ctx: float,
    offers: list[Offer],
    objective: Objective,
    slack: float = 0.05,
    limit: int = 1 << 20,
) -> Admission:
    """Shares of the engine's speculative room for `offers`, beside `primary` sequences whose
    contexts sum to `primary_ctx`; `limit` caps the speculative jobs in all (the KV room or
    the engine's batch). See the module docstring."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, not {objective!r}")
    shares = {o.query_id: len(o.running) for o in offers}
    batch, ctx = primary, primary_ctx
    worth = float(primary)  # the useful tokens a step yields: one a primary, p a candidate
    running = 0
    for o in offers:
        batch += len(o.running)
        ctx += len(o.running) * o.context
        worth += sum(o.running)
        running += len(o.running)
    offered = sum(len(o.candidates) for o in offers)
    if primary:
        base = curve.decode_step_s(primary, primary_ctx)
    else:  # nothing to slow down: the room is what one typical sequence's step allows
        contexts = [o.context for o in offers if o.candidates or o.running]
        base = curve.decode_step_s(1, sum(contexts) / len(contexts)) if contexts else 0.0
    budget = (1 + slack) * base
    out = Admission(shares, 0, offered, "demand", worth - primary)
    prompts = 0.0  # the admitted candidates' prompt rows, spread per step (seconds a step)
    for c in _in_value_order(offers):
        if running + out.admitted >= limit:
            out.bound = "limit"
            break
        now, decode = curve.decode_step_s(batch, ctx), curve.decode_step_s(batch + 1, ctx + c.context)
        prompt = prompt_cost_s(curve, batch + 1, ctx + c.context, c.prompt_tokens, c.context, c.step_tokens)
        after = decode + prompts + prompt
        if objective == "slo":
            if after > budget:
                out.bound = "slack"
                if after - prompt > budget:
                    break  # no later candidate fits either: each costs at least a decode row
                continue  # its prompt does not fit; one whose prompt is cached may
        elif c.p <= 0.0 or (batch and worth * after >= (worth + c.p) * (now + prompts)):
            out.bound = "rate"  # it would lower the useful rate; a later (floor-ordered) one may not
            continue
        shares[c.query_id] += 1
        out.admitted += 1
        batch, ctx, worth, prompts = batch + 1, ctx + c.context, worth + c.p, prompts + prompt
        out.expected_useful += c.p
    return out


def prompt_cost_s(
    curve: StepCurve, batch: int, ctx: float, tokens: int, prefix: float, step_tokens: float
) -> float:
    """What a candidate's `tokens` prompt rows (after `prefix` tokens) add to a step of `batch`
    sequences, spread over the `step_tokens` steps it is expected to decode: the one pass that
    computes them costs that much more than the decode step alone."""
    if tokens <= 0:
        return 0.0
    once = curve.mixed_step_s(batch, ctx, [(tokens, prefix)]) - curve.decode_step_s(batch, ctx)
    return max(0.0, once) / max(1.0, step_tokens)


@dataclass(frozen=True)
class _Candidate:
    query_id: str
    p: float
    context: float
    prompt_tokens: int
    step_tokens: float


def _in_value_order(offers: list[Offer]) -> list[_Candidate]:
    """Every new candidate in admission order: each query's first one, likeliest first (the
    floor), then a merge of the rest by value. Within a query the values are made
    non-increasing, so its candidates come in its own order."""
    heads: list[tuple[float, int, int]] = []  # (-p, offer, position)
    tails: list[tuple[float, int, int, int]] = []  # (-p, position, offer's query order, offer)
    levels: dict[tuple[int, int], float] = {}
    for k, o in enumerate(offers):
        level = 1.0
        for i, p in enumerate(o.candidates):
            level = levels[k, i] = min(level, max(0.0, p))
            if i == 0:
                heads.append((-level, k, i))
            else:
                tails.append((-level, i, k, i))
    heads.sort(key=lambda h: (h[0], offers[h[1]].query_id))
    tails.sort(key=lambda t: (t[0], t[1], offers[t[2]].query_id))
    order = [(k, i) for _, k, i in heads] + [(k, i) for _, _, k, i in tails]
    return [_candidate(offers[k], i, levels[k, i]) for k, i in order]


def _candidate(o: Offer, i: int, p: float) -> _Candidate:
    prompt = o.prompts[i] if i < len(o.prompts) else 0
    return _Candidate(o.query_id, p, o.context, max(0, prompt), o.step_tokens)


def divide(offers: list[Offer], pool: int) -> dict[str, int]:
    """`pool` speculative jobs (those running included) shared in value order with the floor:
    the division `admit` makes, for a pool set elsewhere (several engines' summed room, a
    static k_total)."""
    running = sum(len(o.running) for o in offers)
    return admit(FLAT, 0, 0.0, offers, "throughput", limit=max(0, pool - running)).shares


def even_split(offers: list[Offer], pool: int) -> dict[str, int]:
    """The ablation of T2's division: the same `pool` (those running included), what is left
    after the jobs already running split evenly, one at a time, among the queries that can use
    more (those with the fewest first), each capped by what it offers. (A share below a
    query's running jobs would not stop them: the pool would be exceeded.)"""
    shares = {o.query_id: len(o.running) for o in offers}
    caps = {o.query_id: len(o.running) + len(o.candidates) for o in offers}
    left = max(0, pool - sum(shares.values()))
    while left > 0:
        open_ = sorted((q for q in shares if shares[q] < caps[q]), key=lambda q: shares[q])
        if not open_:
            break
        for q in open_[:left]:  # the fewest first
            shares[q] += 1
            left -= 1
    return shares
