"""Generator worker (`spex worker generator`, one per GPU): `service` (the worker: jobs, slots,
promotion, cancels, heartbeats, reclaims), `engines` (the engine `SPEX_ENGINE` names, built
live), `step_sources` (what a step's text is: the synthetic workload's or the model's) and
`step_curve` (the step curve it publishes for the allocator)."""

from spex.services.generator.service import Generator, main

__all__ = ["Generator", "main"]
