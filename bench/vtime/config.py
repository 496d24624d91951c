"""What a virtual-time run is: the search, the workload, the hardware, and SPEX's switches."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from spex.proto import CONTENTS, SPLITS, Content, Split, SubmitQuestionRequest, submission
from spex.shared.content.datasets import DatasetQuestion
from spex.shared.content.prompt_style import PromptStyle, check_chat_template, prompt_format, template_text
from spex.shared.content.prompts import DEFAULT_SPLIT, DEFAULT_TEMPERATURE
from spex.shared.content.reward_prompts import DEFAULT_PRM_TOKENS, PrmKind, RewardFormat
from spex.shared.core.ids import derived_int
from spex.shared.core.machine import REWARDS, Reward
from spex.shared.core.search import SearchConfig, make_algorithm
from spex.shared.core.search.answers import AnswerSelection
from spex.shared.core.spec.early_stop import EarlyStop
from spex.shared.core.speculation import PREDICTORS, PredictorName
from spex.shared.core.tree import Tree
from spex.shared.engine.api import ENGINES, SERVERS, EngineName, ServerName
from spex.shared.roofline.admission import OBJECTIVES, Objective
from spex.shared.roofline.hardware import Profile, parse_profile
from spex.shared.roofline.measured import load_measured, measured_sim_profile
from spex.shared.sim.requests import SCHEDULINGS, EngineConfig
from spex.shared.sim.workload import WorkloadKnobs

__all__ = ["SCHEDULINGS", "BenchConfig", "check_url"]


def check_url(url: str | None, name: str) -> None:
    """A server's URL: http(s), and no credentials in it (they would reach logs and results)."""
    parsed = urlsplit(url or "")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"{name}: {url!r} is not an http:// or https:// URL")
    if parsed.username or parsed.password:
        raise ValueError(f"{name}: a URL with credentials in it is refused (they would be logged)")


@dataclass(frozen=True)
class BenchConfig:
    algorithm: str = "rebase"
    target: int = 16
    batch_size: int = 1
    questions: int = 16
    first_question: int = 0  # the synthetic workload's questions first_question, first_question + 1, ...
    seed: int = 0
    profile: str = "Llemma-7B@A6000"
    reward_profile: str | None = None  # None: Llemma-7B PRM on its own GPU of the same kind
    reward: Reward = "prm"
    answer_selection: AnswerSelection | None = None
    knobs: WorkloadKnobs = field(default_factory=WorkloadKnobs)
    engine: EngineConfig = field(default_factory=EngineConfig)
    params: dict[str, float | str] = field(default_factory=dict)
    # --- engines and content
    backend: EngineName = "sim"  # the simulated GPU, in-process PyTorch, or a server
    model: str | None = None  # hf: the generator's local model directory (a server: its tokenizer)
    prm: str | None = None  # a local reward-model directory (else the simulated PRM)
    engine_url: str | None = None  # vllm, sglang: the generator's server
    prm_url: str | None = None  # vllm, sglang: a reward server (SGLang --is-embedding, vLLM --runner pooling)
    prm_engine: ServerName = "sglang"  # the server at prm_url
    # The reward model's family and what it reads (`spex.shared.content.reward_prompts`).
    prm_kind: PrmKind = "token-classification"
    prm_step_tag: str = ""  # step-tag, plus-minus: "" the family's (<extra_0>, ки)
    prm_tokens: tuple[str, str] = DEFAULT_PRM_TOKENS  # plus-minus: good, bad
    prm_chat: bool = False  # plus-minus: RLHFlow's chat layout
    content: Content = "synthetic"  # the workload's tree, or the model's text
    dataset: str | None = None  # real content: a JSONL file or a shipped name (math500, easy)
    # real content: the questions themselves (the Python API's dataset), in place of `dataset`
    dataset_questions: tuple[DatasetQuestion, ...] = ()
    level: int | None = None  # real content: only the dataset's questions of this level
    deterministic: bool = False  # hf: batch-invariant outputs (lossless on a real model)
    max_running: int = 16  # hf: sequences decoded together; also the static speculative pool
    sampling_temperature: float = DEFAULT_TEMPERATURE  # real content: the generator's
    step_split: Split = DEFAULT_SPLIT  # real content: where a step ends (content.prompts)
    # Real content: the prompt (`spex.shared.content.prompt_style`): a preset, and texts in place
    # of its own ("": the preset's); a chat template may be the path of a file holding it.
    prompt_preset: str = "spex"
    system_prompt: str = ""
    chat_template: str = ""
    step_delimiter: str = ""
    min_step_tokens: int = 0  # real content: a shorter step goes on past its delimiter
    device: str = "cpu"  # hf: the torch device (cuda on a GPU machine)
    dtype: str = ""  # hf: the weights' and KV's (float32, bfloat16; "": as saved, bf16 on a GPU)
    cuda_graphs: bool = True  # hf on CUDA: decode passes replayed from CUDA graphs
    # A step-time curve measured by `spex profile --json` (hf or a server). On a real engine
    # speculation is then budgeted at the TPOT governor's slack (without it the pool is
    # static, max_running); on the simulator the simulated GPU steps as the curve says.
    profile_file: str | None = None
    # --- SPEX
    mode: str = "baseline"  # a benchmark runs the plain search unless asked
    t1: bool = True  # intra-query speculation
    t2: bool = True  # the budget across queries by value (else the same pool split evenly)
    early_stop: EarlyStop = field(default_factory=EarlyStop)  # T3
    max_amplification: float | None = None
    k_total: int | None = None  # static concurrency cap; None: the live roofline pool
    # Speculation is budgeted to grow primary TPOT by `tpot_target` (feedback per engine), or,
    # with `tpot_slack` set, by a fixed roofline slack (the project's earlier rule).
    tpot_target: float = 0.05
    tpot_slack: float | None = None
    tpot_budget: bool = True  # False: no TPOT budget at all, speculation bounded by the KV room only
    # What speculation is admitted for (`roofline.admission`): "slo", primary TPOT within the
    # target; "throughput", expected useful tokens per second.
    objective: Objective = "slo"
    max_offers: int = 64  # new speculative candidates a query offers per budget round
    # What chooses the speculative work (`speculation.PREDICTORS`): the search's own hooks,
    # the look-ahead replay, or auto (its hooks where it has them, else the look-ahead)
    predictor: PredictorName = "auto"
    scheduling: str = "sglang"  # the sim engine's scheduling ("paused": per-step pausing too)
    cache_nodes: int = 256
    # --- scale-out (simulated engines only)
    # A mixed workload: each question runs one of these (algorithm, target) searches, drawn
    # from (seed, question); empty: every question runs `algorithm`-`target`.
    mix: tuple[tuple[str, int], ...] = ()
    workers: int = 1  # generator workers, one engine each
    affinity: bool = True  # a query's jobs on one worker (consistent hashing), else least-loaded
    worker_slots: int = 0  # jobs a worker takes before its queries spill (0: no limit)

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
        for name, count in (("batch_size", self.batch_size), ("questions", self.questions)):
            if count < 1:
                raise ValueError(f"{name}: must be at least 1, not {count}")
        if self.first_question < 0:
            raise ValueError(f"first_question: must be at least 0, not {self.first_question}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward: must be one of {', '.join(REWARDS)}, not {self.reward!r}")
        if self.max_amplification is not None and self.max_amplification < 1:
            raise ValueError(f"max_amplification: must be at least 1, not {self.max_amplification}")
        if self.k_total is not None and self.k_total < 1:
            raise ValueError(f"k_total: must be at least 1, not {self.k_total}")
        if self.tpot_target < 0:
            raise ValueError(f"tpot_target: must be at least 0, not {self.tpot_target}")
        if self.tpot_slack is not None and self.tpot_slack < 0:
            raise ValueError(f"tpot_slack: must be at least 0, not {self.tpot_slack}")
        if self.scheduling not in SCHEDULINGS:
            raise ValueError(f"scheduling: must be one of {', '.join(SCHEDULINGS)}, not {self.scheduling!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective: must be one of {', '.join(OBJECTIVES)}, not {self.objective!r}")
        if self.predictor not in PREDICTORS:
            raise ValueError(f"predictor: must be one of {', '.join(PREDICTORS)}, not {self.predictor!r}")
        if self.early_stop.alpha <= 0:
            raise ValueError(f"early_stop_alpha: must be positive, not {self.early_stop.alpha}")
        self._validate_engines()
        parse_profile(self.profile)
        parse_profile(self.reward_profile_name)
        # Build one algorithm to check its parameters (unknown names fail here, by name).
        make_algorithm(Tree("check", 0, 1), self.search_config())
        for algorithm, target in self.mix:
            if self.content != "synthetic":
                raise ValueError("mix: a mixed workload runs on synthetic content only")
            make_algorithm(Tree("check", 0, 1), self.search_config(algorithm, target))

    def _validate_engines(self) -> None:
        if self.backend not in ENGINES:
            raise ValueError(f"engine: must be one of {', '.join(ENGINES)}, not {self.backend!r}")
        if self.content not in CONTENTS:
            raise ValueError(f"content: must be one of {', '.join(CONTENTS)}, not {self.content!r}")
        if self.backend == "hf" and not self.model:
            raise ValueError("model: the hf engine needs --model DIR (build one with spex model init)")
        if self.backend == "hf":
            from spex.shared.hf.devices import check_device

            check_device(self.device, "device")
        if self.backend in SERVERS:
            self._validate_servers()
        elif self.engine_url or self.prm_url:
            raise ValueError("engine_url: --engine-url and --prm-url are for --engine vllm or sglang")
        if self.profile_file is not None:
            if self.k_total is not None:
                raise ValueError("profile_file: budgets by the governor's slack; drop --k-total")
            curve = load_measured(self.profile_file)
            differs = (
                curve.mode_differs(self.deterministic, self.dtype or None) if self.backend == "hf" else None
            )
            if differs:
                raise ValueError(
                    f"profile_file: {differs}; measure the curve in the mode the engine runs in "
                    "(spex profile --engine hf with the same --deterministic and --dtype)"
                )
        if self.content == "real":
            if self.backend == "sim":
                raise ValueError("content: real content needs a real engine (--engine hf, vllm, sglang)")
            if not (self.dataset or self.dataset_questions):
                raise ValueError("dataset: real content needs --dataset FILE (or math500, easy)")
            if self.reward == "prm" and not (self.prm or self.prm_url):
                raise ValueError("prm: the prm reward on real content needs --prm DIR (or --reward logprob)")
        for name, path in (("model", self.model), ("prm", self.prm)):
            if path is not None and not (Path(path) / "config.json").is_file():
                raise ValueError(f"{name}: {path!r} is not a model directory (no config.json)")
        if self.workers < 1 or (self.workers > 1 and self.backend != "sim"):
            raise ValueError(f"workers: at least 1, more than 1 only on the sim engine, not {self.workers}")
        if self.worker_slots < 0:
            raise ValueError(f"worker_slots: must be at least 0, not {self.worker_slots}")
        if self.max_running < 1:
            raise ValueError(f"max_running: must be at least 1, not {self.max_running}")
        if self.sampling_temperature < 0:
            raise ValueError(f"sampling_temperature: must be at least 0, not {self.sampling_temperature}")
        if self.step_split not in SPLITS:
            raise ValueError(f"step_split: one of {', '.join(SPLITS)}, not {self.step_split!r}")
        self._validate_prompt()
        if self.knobs.step_token_cap >= 1 and not 0 <= self.min_step_tokens < self.knobs.step_token_cap:
            raise ValueError(
                f"min_step_tokens: at least 0 and below the step cap ({self.knobs.step_token_cap}), "
                f"not {self.min_step_tokens}"
            )

    def _validate_prompt(self) -> None:
        """The prompt and the reward model's family, each checked as a question's would be."""
        style = self.prompt_style()  # a preset, a template file, the lengths
        submission.validate(
            SubmitQuestionRequest(
                msg_id="bench", query_id="bench", question="bench", system_prompt=style.system_prompt,
                step_delimiter=style.step_delimiter,
            )
        )  # fmt: skip
        if style.chat_template:
            check_chat_template(style.chat_template)
        fmt = self.reward_format()
        if fmt.kind == "plus-minus" and self.prm_url and self.prm_engine != "vllm":
            raise ValueError("prm_kind: a plus-minus reward model is served by vllm only (--prm-engine vllm)")
        if self.prm_engine not in SERVERS:
            raise ValueError(f"prm_engine: one of {', '.join(SERVERS)}, not {self.prm_engine!r}")

    def prompt_style(self) -> PromptStyle:
        """The run's prompt: the split and the preset's texts, each given one in its place."""
        fmt = prompt_format(
            self.prompt_preset, self.system_prompt, template_text(self.chat_template), self.step_delimiter
        )
        return PromptStyle.of(self.step_split, fmt)

    def reward_format(self) -> RewardFormat:
        """How the run's reward model reads a path."""
        return RewardFormat(self.prm_kind, self.prm_step_tag, self.prm_tokens, self.prm_chat)

    def _validate_servers(self) -> None:
        for name, url in (("engine_url", self.engine_url), ("prm_url", self.prm_url)):
            if url is not None:
                check_url(url, name)
        if self.prm_engine not in SERVERS:
            raise ValueError(f"prm_engine: must be one of {', '.join(SERVERS)}, not {self.prm_engine!r}")
        if not self.engine_url:
            raise ValueError(f"engine_url: --engine {self.backend} needs --engine-url URL (its server)")
        if self.reward == "prm" and not self.prm_url:
            raise ValueError(
                "prm_url: a server's steps are scored by a reward server (--prm-url) or the logprob reward"
            )
        if self.deterministic and self.backend == "vllm":
            raise ValueError("deterministic: vLLM promises no batch-invariance (hf or sglang)")

    def search_config(self, algorithm: str | None = None, target: int | None = None) -> SearchConfig:
        return SearchConfig(
            algorithm=algorithm or self.algorithm,
            target=target or self.target,
            answer_selection=self.answer_selection,
            max_step_tokens=self.knobs.step_token_cap,
            params=dict(self.params),
        )

    def search_of(self, query_id: str) -> tuple[str, int]:
        """The (algorithm, target) question `query_id` runs."""
        if not self.mix:
            return self.algorithm, self.target
        return self.mix[derived_int(len(self.mix), self.seed, query_id, "mix")]

    def sim_profile(self) -> Profile:
        """The simulated generator's GPU: the catalog's `profile`, or with `profile_file` one
        that steps as the measured engine did (the simulator checked against a real engine)."""
        base = parse_profile(self.profile)
        if self.backend == "sim" and self.profile_file:
            return measured_sim_profile(base, load_measured(self.profile_file))
        return base

    @property
    def reward_profile_name(self) -> str:
        return self.reward_profile or f"Llemma-7B@{self.profile.partition('@')[2]}"

    @property
    def speculating(self) -> bool:
        return self.mode == "spex" and self.t1
