"""What rewards a node: the names a search, the settings and the bench share (light to import:
the settings read them before any search is built)."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["REWARDS", "Reward"]

Reward = Literal["prm", "logprob"]  # a node's reward: the PRM's score, or the step's log-probability
REWARDS: tuple[Reward, ...] = get_args(Reward)
