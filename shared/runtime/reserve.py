"""What a question's search may hold in Redis while it runs: the reserve memory admission counts
for it from its submission to its answer (`services.admission`).

Everything a search holds at its peak is counted, measured with `python -m spex.bench.sizing
--peak` (Redis's used memory while a few questions of one search are searched, less what it held
before; docs/capacity.md, "Sizing Redis"): its tree stream, inbox and sent ids, and its jobs on
the job streams until they are trimmed. It grows with the target, at a rate each algorithm has,
above a part every question holds whatever its target (`FIXED_BYTES`): measured on the simulated
engine, rebase-4 165 KB, rebase-16 325 KB, rebase-64 1.26 MB, rebase-256 3.41 MB; rstar-5 275 KB,
rstar-10 378 KB; rest-5 166 KB; ets-16 325 KB — each below `FIXED_BYTES` plus its rate
(`BYTES_PER_TARGET`) times its target, with some room.

The question itself is held once, in the stored request (and in its entry on the ingress stream
until that is trimmed: `PROMPT_COPIES`); jobs carry no copy of it (`GenerateRequest.
question_stored`), nor of its own system prompt and chat template (`carried_format`). Carried by
every job, as it once was, a 98,000-character question was held 121 times at once in a rebase-16
search and 519 times in a rebase-64 one (11.9 and 50.9 MB a question); stored once, 69–92 KB. A
model's own text makes nodes larger than the synthetic ones these figures are measured with:
`SPEX_MEMORY_PER_TARGET` sets one rate for every algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

from spex.proto import SubmitQuestionRequest

__all__ = ["BYTES_PER_TARGET", "FIXED_BYTES", "PROMPT_COPIES", "Room", "request_bytes", "search_bytes"]

# ReST-MCTS, measured only at a small target (rest-5), is taken at rStar's rate: both roll out to
# a terminal, and their trees deepen alike.
BYTES_PER_TARGET = {"rebase": 20_000, "rstar": 36_000, "ets": 18_000, "rest": 36_000}
FIXED_BYTES = 120_000  # what a question holds whatever its target (its keys, its first jobs)
PROMPT_COPIES = 2  # the stored request, and its entry on the ingress stream until trimmed


def search_bytes(algorithm: str, target: int, per_target: int = 0, question_bytes: int = 0) -> int:
    """Bytes a search of `algorithm` at `target` may hold in Redis, its question of
    `question_bytes` (UTF-8) included (`per_target`: the operator's rate a unit of target,
    0: the measured one)."""
    rate = per_target or BYTES_PER_TARGET.get(algorithm, max(BYTES_PER_TARGET.values()))
    return FIXED_BYTES + rate * target + PROMPT_COPIES * question_bytes


def request_bytes(req: SubmitQuestionRequest, per_target: int = 0) -> int:
    """`search_bytes` of a submitted question, its own prompt texts held with it."""
    held = len(req.question.encode()) + len(req.system_prompt.encode()) + len(req.chat_template.encode())
    return search_bytes(req.algorithm, req.target, per_target, held)


@dataclass(frozen=True)
class Room:
    """What the searches in flight may reserve in all (`free`: the headroom of Redis's maxmemory
    less what it uses) and what one search could reserve at most, with nothing else in Redis
    (`total`: the headroom); on one partition, its share of its shard's (`services.admission`)."""

    free: int
    total: int
