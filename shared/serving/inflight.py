"""A request a serving engine has in flight, and the TPOT governor's measure of the primary ones.

A server shows no view of its steps, so the measure is per request: a primary's time per
generated token, against what it would have been without speculation, summed over tokens as
`EngineStats` sums steps. "Without speculation" is measured on the primaries that ran with no
speculative request in flight (clean ones):

- without a step curve, it is their time per token (an EWMA);
- with one (`step_model`), it is the curve's step of this worker's primaries alone over the
  polls of a request's life, scaled by what clean primaries measured against the curve's
  step for them (an EWMA of the ratio): the curve says how the step depends on the load, the
  clean primaries what it costs on this server now, so a curve measured under other
  conditions cannot hide speculation's cost. Before the first clean primaries, the request's
  own time scaled by the curve (this worker's primaries alone over the server's whole batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from spex.proto.messages import PRIMARY
from spex.shared.engine.api import Completion, EngineRequest
from spex.shared.roofline.measured import MeasuredProfile
from spex.shared.serving.backend import ServerMetrics

__all__ = ["InFlight", "PrimaryTpot"]


@dataclass(eq=False)
class InFlight:
    """A request from its submission to its reply: its id on the server, the task that calls,
    and what the TPOT measure needs of its life."""

    req: EngineRequest
    rid: str
    arrival_s: float
    task: asyncio.Task[None] | None = None
    aborted: bool = False
    sent: bool = False  # the request reached the server (it may be running it)
    beside_spec: bool = False  # a speculative request was in flight at some point of its life
    promoted: bool = False  # its priority was raised while in flight (its timing is no primary's)
    # With a measured step curve: Σ over the polls of its life of the step the server's batch
    # takes, and of the step this worker's primaries alone would take (the governor's ratio).
    full_s: float = 0.0
    alone_s: float = 0.0
    polls: int = 0


class PrimaryTpot:
    """The measure so far: primary tokens counted, their time, and their time alone."""

    def __init__(self) -> None:
        self.ref_s: float | None = None  # the EWMA of primaries' time per token with no speculation
        self.scale: float | None = None  # with a curve: the EWMA of clean primaries' time over its step
        self.tokens = 0
        self.step_s = 0.0
        self.alone_s = 0.0

    def finished(self, f: InFlight, c: Completion, step_model: MeasuredProfile | None) -> None:
        """Count a primary that finished (neither promoted nor a single token)."""
        per_token = (c.time_s - c.arrival_s) / c.generated
        alone: float | None = None  # the per-token time without speculation, where it is known
        if step_model is not None:
            curve_s = f.alone_s / f.polls if f.polls else None  # the curve's step, primaries alone
            if not f.beside_spec:
                if curve_s:
                    ratio = per_token / curve_s
                    self.scale = ratio if self.scale is None else 0.8 * self.scale + 0.2 * ratio
                alone = per_token
            elif self.scale is not None and curve_s:
                alone = min(per_token, self.scale * curve_s)
            elif f.full_s > 0:
                alone = per_token * min(1.0, f.alone_s / f.full_s)
        elif not f.beside_spec:
            ref = self.ref_s
            self.ref_s = per_token if ref is None else 0.8 * ref + 0.2 * per_token
        else:
            alone = self.ref_s
        if alone is not None:
            self.tokens += c.generated
            self.step_s += c.generated * per_token
            self.alone_s += c.generated * alone

    def sample(
        self, inflight: Iterable[InFlight], server: ServerMetrics, step_model: MeasuredProfile | None
    ) -> None:
        """With a step curve: each primary in flight adds the step of the server's batch now
        (its running requests over the KV they hold) and that of this worker's primaries alone."""
        if step_model is None:
            return
        primaries = [f for f in inflight if f.req.priority <= PRIMARY and f.sent]
        if not primaries:
            return
        ctx = sum(sum(t for _, t in f.req.prompt) for f in primaries)
        running = max(server.running, len(primaries))
        held = max(server.kv_usage * server.kv_capacity, ctx)
        full = step_model.decode_step_s(running, held)
        alone = step_model.decode_step_s(len(primaries), ctx)
        for f in primaries:
            f.full_s += full
            f.alone_s += alone
            f.polls += 1
