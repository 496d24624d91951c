"""Offline evaluation in one process: a dataset's questions searched on an engine, with no Redis
and no services. It is `spex bench`'s run (`spex.bench.vtime.run_bench`, and for a comparison
`spex.bench.pairs.compare_pairs`) under a typed front: the same configuration, so the same
seed gives the same trees as `spex bench` and the pipeline."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, overload

from spex._dataset import Dataset, DatasetLike, load_dataset
from spex._options import Engine, Prompt, Reward
from spex._results import Comparison, Evaluation, QuestionResult
from spex.bench.pairs import compare_pairs
from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, BenchResult, QueryRecord, run_bench
from spex.shared.content.datasets import DatasetQuestion
from spex.shared.content.reward_prompts import PRM_KINDS
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SEARCHES
from spex.shared.core.spec.early_stop import EarlyStop
from spex.shared.core.speculation import PredictorFactory, algorithm_predictor
from spex.shared.sim.workload import SyntheticWorkload, load_knobs

__all__ = ["Mode", "bench_config", "evaluate"]

Mode = Literal["baseline", "spex", "compare"]
DEFAULT_QUESTIONS = 16  # the sim engine with no dataset: this many of the synthetic workload's


@overload
def evaluate(
    dataset: DatasetLike | None = ...,
    *,
    engine: Engine | str = ...,
    reward: Reward | str | None = ...,
    algorithm: str = ...,
    target: int = ...,
    mode: Literal["baseline", "spex"] = ...,
    seed: int = ...,
    batch_size: int = ...,
    questions: int | None = ...,
    params: Mapping[str, float] | None = ...,
    answer_selection: str | None = ...,
    early_stop: bool | EarlyStop = ...,
    max_step_tokens: int | None = ...,
    knobs: Mapping[str, object] | None = ...,
    prompt: Prompt | None = ...,
    progress: bool = ...,
) -> Evaluation: ...


@overload
def evaluate(
    dataset: DatasetLike | None = ...,
    *,
    engine: Engine | str = ...,
    reward: Reward | str | None = ...,
    algorithm: str = ...,
    target: int = ...,
    mode: Literal["compare"],
    seed: int = ...,
    batch_size: int = ...,
    questions: int | None = ...,
    params: Mapping[str, float] | None = ...,
    answer_selection: str | None = ...,
    early_stop: bool | EarlyStop = ...,
    max_step_tokens: int | None = ...,
    knobs: Mapping[str, object] | None = ...,
    prompt: Prompt | None = ...,
    progress: bool = ...,
) -> Comparison: ...


def evaluate(
    dataset: DatasetLike | None = None,
    *,
    engine: Engine | str = "sim",
    reward: Reward | str | None = None,
    algorithm: str = "rebase",
    target: int = 16,
    mode: Literal["baseline", "spex", "compare"] = "baseline",
    seed: int = 0,
    batch_size: int = 1,
    questions: int | None = None,
    params: Mapping[str, float] | None = None,
    answer_selection: str | None = None,
    early_stop: bool | EarlyStop = False,
    max_step_tokens: int | None = None,
    knobs: Mapping[str, object] | None = None,
    prompt: Prompt | None = None,
    progress: bool = True,
) -> Evaluation | Comparison:
    """Search each question of a dataset and return what each search found.

    Everything runs in this process: the search, the engine (the simulated GPU, a model in
    process, or HTTP calls to a server) and the reward. A question's tree depends on its id
    and `seed` alone, so it is the tree `spex bench` and the pipeline grow for it.

    Args:
        dataset: The questions (anything `load_dataset` takes). `None` on the `sim` engine:
            the synthetic workload's first `questions` (16 unless given).
        engine: The generator: an `Engine`, or `"sim"`.
        reward: How steps are scored: a `Reward`, `"logprob"` or `"simulated"`. Default: the
            simulated PRM on `sim`, the generator's log-probabilities on a real engine.
        algorithm: The search, by name (`rebase`, `ets`, `rstar`, `rest`, and any search
            registered in `spex.shared.core.search.SEARCHES`).
        target: The search's width (REBASE, ETS) or rollouts (MCTS).
        mode: `"baseline"` (the plain search), `"spex"` (with speculation), or `"compare"`:
            both, back to back on the same questions and seed, with the lossless check.
        seed: What every search's random choices derive from (with the question's id).
        batch_size: Questions searched at once.
        questions: Only the dataset's first this many.
        params: The search's parameters by name (`max_depth`, `temperature`, ...).
        answer_selection: How the answer is chosen among the solutions (`majority`,
            `weighted`, `best`); default: the search's own.
        early_stop: Adaptive early termination (T3): `True` for its defaults, or an
            `EarlyStop`. It may change the answers, so it is off unless asked for.
        max_step_tokens: A step's token cap.
        knobs: The synthetic workload's knobs by name (`spex bench --list-knobs`), for `sim`.
        prompt: How a real model's steps are written and read (`Prompt`).
        progress: Show a progress bar (per run) while it runs.

    Returns:
        An `Evaluation` (a `QuestionResult` per question and the run's figures), or with
        `mode="compare"` a `Comparison` of the two runs.

    Raises:
        ValueError: One line naming the argument (or field) that is wrong; nothing has run.
        spex.EngineFailed: A real engine failed a request mid-run (its server's error or
            timeout): the run cannot go on.
    """
    if mode not in ("baseline", "spex", "compare"):
        raise ValueError(f"mode: one of baseline, spex, compare, not {mode!r}")
    given = _questions(dataset, _engine(engine), questions)
    cfg = bench_config(
        given, engine=engine, reward=reward, algorithm=algorithm, target=target, mode=mode, seed=seed,
        batch_size=batch_size, params=params, answer_selection=answer_selection, early_stop=early_stop,
        max_step_tokens=max_step_tokens, knobs=knobs, prompt=prompt,
    )  # fmt: skip
    cfg.validate()
    runs = _Runs(cfg, given, progress)
    if mode != "compare":
        return runs.evaluation(runs.run(cfg))
    record = compare_pairs(cfg, 1, runs.run).pairs[0]
    base, spex = runs.last["baseline"], runs.last["spex"]
    return Comparison(
        baseline=runs.evaluation(base),
        spex=runs.evaluation(spex),
        lossless=record.lossless,
        trees_identical=record.trees_identical,
        same_answers=record.same_answers,
        max_reward_difference=record.max_reward_difference,
        speedup=record.speedup,
        summary=_as_written(record.to_json()),
    )


def bench_config(
    dataset: Dataset | int,
    *,
    engine: Engine | str = "sim",
    reward: Reward | str | None = None,
    algorithm: str = "rebase",
    target: int = 16,
    mode: Mode = "baseline",
    seed: int = 0,
    batch_size: int = 1,
    params: Mapping[str, float] | None = None,
    answer_selection: str | None = None,
    early_stop: bool | EarlyStop = False,
    max_step_tokens: int | None = None,
    knobs: Mapping[str, object] | None = None,
    prompt: Prompt | None = None,
) -> BenchConfig:
    """The benchmark's configuration `evaluate` runs (`dataset`: the questions, or how many of
    the synthetic workload's): every argument reaches the engines through here. With
    `mode="compare"`, the SPEX run's (its baseline is a copy)."""
    if algorithm not in SEARCHES:
        raise ValueError(f"algorithm: one of {', '.join(sorted(SEARCHES))}, not {algorithm!r}")
    eng, rew, prompt = _engine(engine), _reward(reward, _engine(engine)), prompt or Prompt()
    sets = [f"{k}={v}" for k, v in (knobs or {}).items()]
    if max_step_tokens is not None:
        sets.append(f"step_token_cap={max_step_tokens}")
    given = dataset if isinstance(dataset, Dataset) else None
    return BenchConfig(
        algorithm=algorithm,
        target=target,
        batch_size=batch_size,
        questions=len(dataset) if isinstance(dataset, Dataset) else dataset,
        seed=seed,
        profile=eng.profile,
        reward=rew.kind,
        answer_selection=answer_selection,  # type: ignore[arg-type]  # checked by validate
        knobs=load_knobs(None, sets),
        params=dict(params or {}),
        mode="spex" if mode == "compare" else mode,
        early_stop=early_stop if isinstance(early_stop, EarlyStop) else EarlyStop(bool(early_stop)),
        backend=eng.kind,
        model=eng.model,
        prm=rew.model,
        engine_url=eng.url,
        prm_url=rew.url,
        prm_engine=rew.server,
        prm_kind=rew.prm_kind or "token-classification",  # type: ignore[arg-type]  # checked by Reward
        prm_step_tag=rew.step_tag,
        prm_tokens=rew.tokens,
        prm_chat=rew.chat,
        prompt_preset=prompt.preset,
        system_prompt=prompt.system_prompt,
        chat_template=prompt.chat_template,
        step_delimiter=prompt.step_delimiter,
        content="synthetic" if eng.kind == "sim" else "real",
        dataset_questions=tuple(
            DatasetQuestion(q.query_id, q.text, q.reference or "") for q in (given or ())
        ),
        deterministic=eng.deterministic,
        max_running=eng.max_running,
        sampling_temperature=prompt.temperature,
        step_split=prompt.step_split,
        min_step_tokens=prompt.min_step_tokens,
        device=eng.device,
        dtype=eng.dtype,
    )


def _engine(engine: Engine | str) -> Engine:
    if isinstance(engine, Engine):
        return engine
    if engine == "sim":
        return Engine.sim()
    if engine in ("hf", "vllm", "sglang"):
        how = "Engine.hf(MODEL_DIR)" if engine == "hf" else f"Engine.{engine}(URL)"
        raise ValueError(f"engine: {engine!r} needs its model or server: pass {how}")
    raise ValueError(f"engine: 'sim' or an Engine (Engine.hf, Engine.vllm, Engine.sglang), not {engine!r}")


def _reward(reward: Reward | str | None, engine: Engine) -> Reward:
    """The reward as given, or the engine's default, checked against the engine it scores."""
    if reward is None:
        reward = Reward.simulated() if engine.kind == "sim" else Reward.logprob()
    elif isinstance(reward, str):
        named = {"logprob": Reward.logprob(), "simulated": Reward.simulated()}
        if reward not in named:
            raise ValueError(
                f"reward: 'logprob', 'simulated' or a Reward (Reward.prm, Reward.served), not {reward!r}"
            )
        reward = named[reward]
    if reward.kind not in ("prm", "logprob"):
        raise ValueError(f"reward.kind: 'prm' or 'logprob', not {reward.kind!r}")
    if reward.prm_kind is not None and (reward.kind != "prm" or reward.prm_kind not in PRM_KINDS):
        raise ValueError(
            f"reward.prm_kind: a PRM's family, one of {', '.join(PRM_KINDS)}, not {reward.prm_kind!r}"
        )
    served = engine.kind in ("vllm", "sglang")
    if reward.kind == "prm" and engine.kind == "sim" and not reward.is_simulated:
        raise ValueError(
            "reward: the sim engine's steps are synthetic: Reward.simulated() or Reward.logprob()"
        )
    if reward.is_simulated and engine.kind != "sim":
        raise ValueError(
            "reward: the simulated PRM scores the synthetic workload (the sim engine): on a real engine "
            "give Reward.prm(DIR), Reward.served(URL) or Reward.logprob()"
        )
    if reward.url is not None and not served:
        raise ValueError(
            "reward: a served PRM (Reward.served) goes with a served generator (Engine.vllm, Engine.sglang)"
        )
    if reward.kind == "prm" and reward.url is None and served and reward.model is not None:
        raise ValueError("reward: a server's steps are scored by Reward.served(URL) or Reward.logprob()")
    return reward


def _questions(dataset: DatasetLike | None, engine: Engine, limit: int | None) -> Dataset | int:
    """The dataset's questions (its first `limit`), or how many synthetic ones on `sim`."""
    if limit is not None and limit < 1:
        raise ValueError(f"questions: at least 1, not {limit}")
    if dataset is not None:
        return load_dataset(dataset, limit=limit)
    if engine.kind != "sim":
        raise ValueError(f"dataset: the {engine.kind} engine needs questions (see spex.load_dataset)")
    return DEFAULT_QUESTIONS if limit is None else limit


@dataclass
class _Runs:
    """The runs of one evaluation: each with its progress bar, the last of each mode kept (a
    comparison's warm-up on a real engine is a baseline run that the recorded one replaces)."""

    cfg: BenchConfig
    given: Dataset | int
    progress: bool

    def __post_init__(self) -> None:
        self.last: dict[str, BenchResult] = {}
        self.by_id = {q.query_id: q for q in self.given} if isinstance(self.given, Dataset) else {}
        self.workload = SyntheticWorkload(self.cfg.knobs, self.cfg.seed)  # synthetic content's questions

    def run(
        self,
        cfg: BenchConfig,
        on_finish: Callable[[QueryMachine], None] | None = None,
        predictor: PredictorFactory = algorithm_predictor,
    ) -> BenchResult:
        with _bar(self.progress, f"{cfg.mode} {cfg.algorithm}-{cfg.target}", cfg.questions) as advance:

            def finished(machine: QueryMachine) -> None:
                advance()
                if on_finish is not None:
                    on_finish(machine)

            result = run_bench(cfg, finished, predictor)
        self.last[cfg.mode] = result
        return result

    def evaluation(self, res: BenchResult) -> Evaluation:
        summary = summarize(res)
        cfg = res.config
        results = tuple(self._result(r) for r in res.records)
        graded = [r.correct for r in results if r.correct is not None]
        return Evaluation(
            mode=cfg.mode,
            algorithm=cfg.algorithm,
            target=cfg.target,
            seed=cfg.seed,
            engine=cfg.backend,
            reward=cfg.reward,
            content=cfg.content,
            results=results,
            accuracy=sum(graded) / len(graded) if graded else None,
            throughput_qpm=summary.throughput_qpm,
            makespan_s=summary.makespan_s,
            wall_s=summary.wall_s,
            tokens_generated=summary.tokens_generated,
            tokens_all=summary.tokens_all,
            hit_rate=summary.hit_rate,
            compute_amplification=summary.compute_amplification,
            summary=_as_written(summary.to_json()),
        )

    def _result(self, r: QueryRecord) -> QuestionResult:
        question = self.by_id.get(r.query_id)
        reference: str | None
        correct: bool | None
        if self.cfg.content == "synthetic":  # the workload's question: its answer is the reference
            synthetic = self.workload.question(r.query_id)
            text, reference, correct = synthetic.text, synthetic.reference_answer, r.correct
        else:
            assert question is not None
            text, reference = question.text, question.reference
            correct = r.correct if reference is not None else None
        return QuestionResult(
            query_id=r.query_id,
            question=question.text if question is not None else text,
            reference=reference,
            answer=r.answer,
            correct=correct,
            solution=r.solution,
            tree_digest=r.digest,
            nodes=r.nodes,
            tokens=r.tokens,
            latency_s=r.latency_s,
            early_stopped=r.early_stopped,
            speculative_issued=r.spec_issued,
            speculative_adopted=r.spec_adopted,
        )


def _as_written(record: dict[str, object]) -> dict[str, object]:
    """A record as its results file holds it (tuples as lists): what reading the file gives."""
    return json.loads(json.dumps(record))  # type: ignore[no-any-return]


@contextmanager
def _bar(shown: bool, label: str, total: int) -> Iterator[Callable[[], None]]:
    """A progress bar of `total` questions (rich's; in a notebook too), or none; yields the call
    that advances it by one."""
    if not shown:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)
