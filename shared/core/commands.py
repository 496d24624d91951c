"""What the query state machine asks its driver to do: generate, score, cancel, promote,
finish. Each driver (the coordinator service, the virtual-time driver) turns these into
messages or engine calls; the machine never does I/O itself."""

from __future__ import annotations

from dataclasses import dataclass

from spex.proto.messages import PRIMARY
from spex.shared.core.tree import Node

__all__ = [
    "CancelCommand",
    "Command",
    "FinishCommand",
    "GenerateCommand",
    "PromoteCommand",
    "ScoreCommand",
    "Segment",
    "prompt_segments",
]

Segment = tuple[str, int]  # (node id, tokens): one step of a prompt, the unit prefix caches key by


@dataclass(frozen=True)
class GenerateCommand:
    job_id: str
    node: Node
    prompt: tuple[Segment, ...]  # (node id, tokens) from the root: what the step continues
    max_new_tokens: int
    priority: int = PRIMARY


@dataclass(frozen=True)
class ScoreCommand:
    node: Node
    prompt: tuple[Segment, ...]  # the path including the node
    priority: int = PRIMARY


@dataclass(frozen=True)
class CancelCommand:
    job_id: str


@dataclass(frozen=True)
class PromoteCommand:
    """A speculative job the search now waits on: raise it to primary priority."""

    job_id: str


@dataclass(frozen=True)
class FinishCommand:
    query_id: str
    answer: str | None
    early_stopped: bool = False


Command = GenerateCommand | ScoreCommand | CancelCommand | PromoteCommand | FinishCommand


def prompt_segments(node: Node) -> tuple[Segment, ...]:
    """The node's context as cache segments: question, then every step down to `node`."""
    out: list[Segment] = []
    n: Node | None = node
    while n is not None:
        out.append((n.id, n.tokens))
        n = n.parent
    out.reverse()
    return tuple(out)
