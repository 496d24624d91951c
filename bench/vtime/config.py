"""What a virtual-time run is: the search, the workload, the hardware, and SPEX's switches."""

from __future__ import annotations

from dataclasses import dataclass, field

from spex.proto import SubmitQuestionRequest, submission
from spex.shared.core.machine import REWARDS
from spex.shared.core.search import SearchConfig, make_algorithm
from spex.shared.core.spec.early_stop import EarlyStop
from spex.shared.core.tree import Tree
from spex.shared.roofline.hardware import parse_profile
from spex.shared.sim.engine import EngineConfig
from spex.shared.sim.workload import WorkloadKnobs

__all__ = ["BenchConfig"]


@dataclass(frozen=True)
class BenchConfig:
    algorithm: str = "rebase"
    target: int = 16
    batch_size: int = 1
    questions: int = 16
    seed: int = 0
    profile: str = "Llemma-7B@A6000"
    reward_profile: str | None = None  # None: Llemma-7B PRM on its own GPU of the same kind
    reward: str = "prm"
    answer_selection: str | None = None
    knobs: WorkloadKnobs = field(default_factory=WorkloadKnobs)
    engine: EngineConfig = field(default_factory=EngineConfig)
    params: dict[str, float] = field(default_factory=dict)
    # --- SPEX
    mode: str = "baseline"  # a benchmark runs the plain search unless asked
    t1: bool = True  # intra-query speculation
    t2: bool = True  # softmax budget across queries (else an even split)
    early_stop: EarlyStop = field(default_factory=EarlyStop)  # T3
    max_amplification: float | None = None
    k_total: int | None = None  # static concurrency cap; None: the live roofline pool
    tpot_slack: float = 0.10  # speculation may grow a decode step by at most this fraction
    temperature: float = 0.5  # τ of the T2 softmax
    cache_nodes: int = 256

    def validate(self) -> None:
        """Raise ValueError naming the first bad field. What each question would be submitted
        with is checked by the submission validator every other way in uses."""
        submission.validate(
            SubmitQuestionRequest(
                msg_id="bench",
                query_id="bench",
                question="bench",
                algorithm=self.algorithm,
                target=self.target,
                seed=self.seed,
                mode=self.mode,
            )
        )
        for name in ("batch_size", "questions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, not {getattr(self, name)}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward: must be one of {', '.join(REWARDS)}, not {self.reward!r}")
        if self.max_amplification is not None and self.max_amplification < 1:
            raise ValueError(f"max_amplification: must be at least 1, not {self.max_amplification}")
        if self.k_total is not None and self.k_total < 1:
            raise ValueError(f"k_total: must be at least 1, not {self.k_total}")
        if self.temperature <= 0:
            raise ValueError(f"temperature: must be positive, not {self.temperature}")
        if self.early_stop.alpha <= 0:
            raise ValueError(f"early_stop_alpha: must be positive, not {self.early_stop.alpha}")
        parse_profile(self.profile)
        parse_profile(self.reward_profile_name)
        # Build one algorithm to check its parameters (unknown names fail here, by name).
        make_algorithm(Tree("check", 0, 1), self.search_config())

    def search_config(self) -> SearchConfig:
        return SearchConfig(
            algorithm=self.algorithm,
            target=self.target,
            answer_selection=self.answer_selection,
            max_step_tokens=self.knobs.step_token_cap,
            params=dict(self.params),
        )

    @property
    def reward_profile_name(self) -> str:
        return self.reward_profile or f"Llemma-7B@{self.profile.partition('@')[2]}"

    @property
    def speculating(self) -> bool:
        return self.mode == "spex" and self.t1
