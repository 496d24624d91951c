"""What the searches generate, and on which engines: the two content modes of a run.

- `SyntheticContent`: step lengths, texts, rewards and answers come from the synthetic
  workload. On the simulator that is the only content; on a real engine the engine generates
  exactly the workload's number of tokens (its own text is ignored), which times the
  synthetic tree on real hardware — the way to check the simulator. Its prompts are then
  sized to the workload's token counts too (`SizedPrompt`: the question's head and each step
  padded or cut to the tokens the simulator counts), where the engine can count tokens.
- `RealContent`: a real model writes the steps (a dataset's questions, the step delimiter,
  `\\boxed{}` answers), a reward model scores them (or the generator's log-probabilities do),
  and answers are graded against the dataset's reference with math-verify.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from spex.bench.vtime.config import BenchConfig
from spex.proto import FinishReason
from spex.shared.content.datasets import load_questions
from spex.shared.content.prompts import (
    PromptStyle,
    SizedPrompt,
    Template,
    plain_template,
    prompt_pieces,
)
from spex.shared.core.commands import GenerateCommand, ScoreCommand
from spex.shared.core.search.answers import Equivalence
from spex.shared.core.search.base import SEARCHES
from spex.shared.core.tree import Node
from spex.shared.engine.api import ENGINES, UNTIL_STOP, Completion, Engine, EngineName, EngineRequest
from spex.shared.roofline.hardware import parse_profile
from spex.shared.sim.engine import SimEngine
from spex.shared.sim.workload import Generation, SyntheticQuestion, SyntheticWorkload

if TYPE_CHECKING:
    from spex.bench.vtime.wallclock import WallClock
    from spex.shared.serving.engine import ServingEngine

__all__ = [
    "Content",
    "Question",
    "RealContent",
    "SizedPrompt",
    "SyntheticContent",
    "make_content",
    "make_engines",
    "sim_generator",
]

START_TIMEOUT_S = 60.0  # a server that does not answer by then is not there


@dataclass(frozen=True)
class Question:
    query_id: str
    text: str
    prompt_tokens: int
    reference_answer: str


@dataclass(frozen=True)
class Step:
    """A finished generation, as the query machine takes it."""

    text: str
    tokens: int
    finish_reason: FinishReason
    mean_logprob: float


class Content(Protocol):
    questions: list[Any]  # Question or SyntheticQuestion: query_id, text, prompt_tokens, reference_answer
    same_answer: Equivalence | None  # how votes group answers (None: by spelling)

    def generate(self, question: Any, cmd: GenerateCommand, rid: str) -> EngineRequest: ...

    def generated(self, question: Any, path: list[str], c: Completion) -> Step: ...

    def score(self, question: Any, cmd: ScoreCommand, rid: str) -> EngineRequest: ...

    def reward(self, question: Any, path: list[str], c: Completion) -> float: ...

    def correct(self, answer: str | None, question: Any) -> bool: ...

    def forget(self, question: Any, rid: str) -> None:
        """Generation `rid` was aborted: nothing will be read of it."""


def sim_generator(cfg: BenchConfig) -> SimEngine:
    """One simulated generator engine (a worker's GPU)."""
    engine = replace(
        cfg.engine,
        scheduling=cfg.scheduling,
        spec_step_slack=0.10 if cfg.tpot_slack is None else cfg.tpot_slack,
    )
    return SimEngine(cfg.sim_profile(), engine if cfg.speculating else cfg.engine)


def make_engines(cfg: BenchConfig) -> tuple[Engine, Engine | None]:
    """The generator engine and the reward engine (None for the logprob reward), as the table
    builds them for `cfg.backend` (an unknown one: a one-line ValueError, never a default)."""
    build = ENGINE_BUILDERS.get(cfg.backend)
    if build is None:
        raise ValueError(f"engine: must be one of {', '.join(ENGINES)}, not {cfg.backend!r}")
    return build(cfg)


def _sim_engines(cfg: BenchConfig) -> tuple[Engine, Engine | None]:
    return _with_reward(cfg, sim_generator(cfg))


def _hf_engines(cfg: BenchConfig) -> tuple[Engine, Engine | None]:
    return _with_reward(cfg, _hf_generator(cfg))


def _with_reward(cfg: BenchConfig, gen: Engine) -> tuple[Engine, Engine | None]:
    """`gen`, and the reward engine in process: a local PRM, else the simulated one."""
    if cfg.reward != "prm":
        return gen, None
    if cfg.prm is not None:
        from spex.shared.hf.reward import RewardConfig, RewardEngine

        config = RewardConfig(deterministic=cfg.deterministic, device=cfg.device)
        return gen, RewardEngine.from_dir(cfg.prm, config, cfg.reward_format())
    return gen, SimEngine(parse_profile(cfg.reward_profile_name))


# The last hf generator's model, tokenizer and forward pass, by what they were built from: the
# runs of a compare (and a gpu check's cells) load a model once, and a 7B one's weights, fused
# layers and captured CUDA graphs are not built again for every run.
_HF_LOADED: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}


def _hf_generator(cfg: BenchConfig) -> Engine:
    from spex.shared.hf.engine import HFConfig, HFEngine
    from spex.shared.hf.models import load_lm, load_tokenizer

    config = HFConfig(
        cfg.max_running,
        deterministic=cfg.deterministic,
        device=cfg.device,
        dtype=cfg.dtype or None,
        cuda_graphs=cfg.cuda_graphs,
    )
    key = (str(cfg.model), config)
    if key in _HF_LOADED:
        model, tokenizer, runner = _HF_LOADED[key]
        if runner.pool is None or runner.pool.free_pages == runner.pool.pages - 1:  # the last run closed
            return HFEngine(model, tokenizer, config, runner)
    _HF_LOADED.clear()
    gc.collect()  # the last model (and its KV pool) let go before this one is built
    engine = HFEngine(
        load_lm(str(cfg.model), cfg.device, cfg.dtype or None), load_tokenizer(str(cfg.model)), config
    )
    _HF_LOADED[key] = (engine.model, engine.tokenizer, engine.runner)
    return engine


def _serving_engines(cfg: BenchConfig) -> tuple[Engine, Engine | None]:
    """A live server's engine, and a reward server's with --prm-url (`cfg.prm_engine`'s: SGLang's
    /classify, vLLM's /pooling); both on one wall clock. The generator's prompts go through the
    chat template of `cfg.model` (the served model's directory), or plain text without one."""
    from spex.bench.vtime.wallclock import WallClock
    from spex.shared.serving import open_engine

    clock = WallClock()
    try:
        live = open_engine(
            cfg.backend, str(cfg.engine_url), tokenizer_dir=cfg.model or "", deterministic=cfg.deterministic
        )
        live.poll_s = 0.1  # the loop samples the server's running gauge as it turns
        gen = _wall_engine(live, clock, "engine_url")
        if cfg.reward != "prm":
            return gen, None
        prm, tokenizer = cfg.reward_format(), cfg.prm or ""
        scorer = open_engine(cfg.prm_engine, str(cfg.prm_url), reward=True, tokenizer_dir=tokenizer, prm=prm)
        return gen, _wall_engine(scorer, clock, "prm_url")
    except BaseException:
        clock.close()
        raise


def _wall_engine(live: ServingEngine, clock: WallClock, field: str) -> Engine:
    from spex.bench.vtime.wallclock import WallEngine
    from spex.shared.serving import EngineUnavailable

    try:
        return WallEngine(live, clock, START_TIMEOUT_S)
    except EngineUnavailable as exc:  # not there, or started without a flag SPEX needs
        raise ValueError(f"{field}: {exc}") from None


# Each engine a run may name, with its reward engine (a test holds the keys to ENGINES).
ENGINE_BUILDERS: dict[EngineName, Callable[[BenchConfig], tuple[Engine, Engine | None]]] = {
    "sim": _sim_engines,
    "hf": _hf_engines,
    "vllm": _serving_engines,
    "sglang": _serving_engines,
}


def make_content(cfg: BenchConfig, gen: Engine, prm: Engine | None) -> Content:
    if cfg.content == "real":
        return RealContent(cfg, gen, prm)
    return SyntheticContent(cfg, gen, prm)


def _template(engine: Engine | None) -> Template:
    """The engine's prompt template; plain for the simulator (and for no engine)."""
    template = engine.template if engine is not None else None
    return template or plain_template


def _sized(engine: Engine | None, style: PromptStyle) -> SizedPrompt | None:
    """How a real engine's synthetic prompts are written (None on the simulator: no text)."""
    if engine is None or isinstance(engine, SimEngine):
        return None
    return SizedPrompt(_template(engine), style, engine.count_tokens)


def _steps(node: Node) -> list[str]:
    return [n.text for n in node.path()]


class SyntheticContent:
    same_answer: Equivalence | None = None

    def __init__(self, cfg: BenchConfig, gen: Engine, prm: Engine | None) -> None:
        self.workload = SyntheticWorkload(cfg.knobs, cfg.seed, SEARCHES[cfg.algorithm].family)
        # The workload's question for each id: the given questions' (their text is not read, as
        # the pipeline's synthetic steps do not read it), else first_question, first_question + 1, ...
        ids = [q.query_id for q in cfg.dataset_questions[: cfg.questions]] or [
            f"q{cfg.first_question + i:05d}" for i in range(cfg.questions)
        ]
        self.questions: list[SyntheticQuestion] = [self.workload.question(qid) for qid in ids]
        # A mixed workload writes each question's steps in its own search's style.
        styles = {style: SyntheticWorkload(cfg.knobs, cfg.seed, style) for style in ("bfs", "dfs")}
        self._workload_of = {
            q.query_id: styles[SEARCHES[cfg.search_of(q.query_id)[0]].family] for q in self.questions
        }
        self._pending: dict[tuple[str, str], Generation] = {}  # generated once, read at completion
        # A real engine reads text: the synthetic question's and steps', split and sampled as
        # the services do (the tokens are the workload's count whatever they are).
        style, self._temperature = cfg.prompt_style(), cfg.sampling_temperature
        self._gen_text = _sized(gen, style)
        self._prm_text = _sized(prm, style.without_template())

    def generate(self, question: SyntheticQuestion, cmd: GenerateCommand, rid: str) -> EngineRequest:
        path = [n.id for n in cmd.node.path()]
        gen = self._workload_of[question.query_id].generate(question, path)
        self._pending[(question.query_id, rid)] = gen
        tokens = min(gen.tokens, cmd.max_new_tokens)
        req = EngineRequest(rid, cmd.prompt, cmd.node.id, tokens, cmd.max_new_tokens, cmd.priority)
        if self._gen_text is not None:
            assert cmd.node.parent is not None
            req.text = self._gen_text.pieces(question.text, _steps(cmd.node.parent), cmd.prompt)
            req.seed, req.temperature = cmd.node.seed, self._temperature
        return req

    def generated(self, question: SyntheticQuestion, path: list[str], c: Completion) -> Step:
        gen = self._pending.pop((question.query_id, c.rid), None)
        if gen is None:
            gen = self._workload_of[question.query_id].generate(question, path)
        return Step(gen.text, c.generated, gen.finish_reason, gen.mean_logprob)

    def score(self, question: SyntheticQuestion, cmd: ScoreCommand, rid: str) -> EngineRequest:
        req = EngineRequest(rid, cmd.prompt, cmd.node.id + "/s", 0, priority=cmd.priority)
        if self._prm_text is not None:
            req.text = self._prm_text.pieces(question.text, _steps(cmd.node), cmd.prompt)
        return req

    def reward(self, question: SyntheticQuestion, path: list[str], c: Completion) -> float:
        return self.workload.prm_reward(question, path)

    def forget(self, question: SyntheticQuestion, rid: str) -> None:
        self._pending.pop((question.query_id, rid), None)

    def correct(self, answer: str | None, question: SyntheticQuestion) -> bool:
        return answer == question.reference_answer


class RealContent:
    def __init__(self, cfg: BenchConfig, gen: Engine, prm: Engine | None) -> None:
        from spex.shared.content.grading import equivalent  # math-verify (sympy): real content only

        self.cfg = cfg
        self.same_answer: Equivalence | None = equivalent
        self._gen_text = _template(gen)
        self._prm_text = _template(prm)
        self.style, self.reward_format = cfg.prompt_style(), cfg.reward_format()
        count = gen.count_tokens or len  # a server without --model: characters
        self.questions: list[Question] = []
        given = list(cfg.dataset_questions[: cfg.questions])
        for q in given or load_questions(str(cfg.dataset), cfg.questions, level=cfg.level):
            head = self._gen_text(q.text, self.style)
            self.questions.append(Question(q.query_id, q.text, count(head), q.reference_answer))

    def generate(self, question: Question, cmd: GenerateCommand, rid: str) -> EngineRequest:
        assert cmd.node.parent is not None
        return EngineRequest(
            rid,
            cmd.prompt,
            cmd.node.id,
            UNTIL_STOP,
            cmd.max_new_tokens,
            cmd.priority,
            seed=cmd.node.seed,
            temperature=self.cfg.sampling_temperature,
            stop=self.style.stop_strings(),
            text=tuple(prompt_pieces(question.text, _steps(cmd.node.parent), self._gen_text, self.style)),
            min_tokens=self.cfg.min_step_tokens,
        )

    def generated(self, question: Question, path: list[str], c: Completion) -> Step:
        return Step(c.text.strip(), c.generated, c.stop_reason or "stop", c.logprob_mean)

    def score(self, question: Question, cmd: ScoreCommand, rid: str) -> EngineRequest:
        pieces = tuple(self.reward_format.pieces(question.text, _steps(cmd.node), self._prm_text, self.style))
        return EngineRequest(rid, cmd.prompt, cmd.node.id + "/s", 0, priority=cmd.priority, text=pieces)

    def reward(self, question: Question, path: list[str], c: Completion) -> float:
        assert c.reward is not None, "a reward engine's completion without a reward"
        return c.reward

    def forget(self, question: Question, rid: str) -> None:
        pass

    def correct(self, answer: str | None, question: Question) -> bool:
        from spex.shared.content.grading import grade  # math-verify (sympy) loads only for real content

        return grade(answer, question.reference_answer)
