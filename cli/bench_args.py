"""`spex bench`'s flags (the search and workload, SPEX's switches, the driver, the engine and
its content) and the `BenchConfig` they describe."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from spex.cli.searches import parse_params
from spex.proto import CONTENTS, MODES, PROMPT_PRESETS, SPLITS
from spex.shared.content.prompts import DEFAULT_SPLIT, DEFAULT_TEMPERATURE
from spex.shared.content.reward_prompts import PRM_KINDS, RewardFormat
from spex.shared.core.machine import REWARDS
from spex.shared.core.search.answers import SELECTIONS
from spex.shared.core.search.base import SEARCHES, preset_params
from spex.shared.core.spec.early_stop import EarlyStop
from spex.shared.core.speculation import PREDICTORS
from spex.shared.engine.api import ENGINES, SERVERS
from spex.shared.roofline.admission import OBJECTIVES
from spex.shared.sim.requests import SCHEDULINGS
from spex.shared.sim.workload import WorkloadKnobs, load_knobs

if TYPE_CHECKING:  # the benchmark is imported when it runs, not to parse its flags
    from spex.bench.vtime import BenchConfig

__all__ = ["DEFAULT_JSON", "add_bench_parser", "bench_config", "parse_mix"]

DEFAULT_JSON = "results/bench.json"


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="run the virtual-time benchmark")
    _workload_args(b)
    _speculation_args(b)
    _driver_args(b)
    _engine_args(b)


def _workload_args(b: argparse.ArgumentParser) -> None:
    """The search, the questions, the hardware and the workload."""
    b.add_argument(
        "--algorithm", choices=sorted(SEARCHES), default="rebase", help="the tree search (`spex searches`)"
    )
    b.add_argument("--target", type=int, default=16, help="REBASE/ETS width or MCTS rollouts")
    b.add_argument("--batch-size", type=int, default=1, help="questions in flight")
    b.add_argument("--questions", type=int, default=16, help="questions to run")
    b.add_argument("--seed", type=int, default=0, help="the workload's and the searches' seed")
    b.add_argument("--profile", default="Llemma-7B@A6000", help="MODEL@GPU of the generator")
    b.add_argument("--reward-profile", default=None, help="MODEL@GPU of the PRM (default Llemma-7B@same GPU)")
    b.add_argument(
        "--reward",
        choices=list(REWARDS),
        default="prm",
        help="a step's reward: prm, a reward model's score (--prm DIR or --prm-url URL; with neither, "
        "the simulated PRM of --reward-profile on the sim and hf engines' synthetic content, refused "
        "on real content and on vllm and sglang), or logprob, the generator's own log-probability",
    )
    b.add_argument(
        "--answer-selection",
        choices=list(SELECTIONS),
        default=None,
        help="how the answer is chosen among the solutions (default: the algorithm's own)",
    )
    b.add_argument("--workload", default=None, help="TOML file of workload knobs")
    b.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="override a knob")
    b.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a parameter of the search, a number or text (`spex searches` lists each search's)",
    )
    b.add_argument("--preset", default=None, help="named algorithm parameters (ets: ets-16, ets-64, ets-256)")
    b.add_argument(
        "--mix", default=None, metavar="ALGO-N,...", help="a mixed workload: each question runs one of these"
    )
    b.add_argument("--json", default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})")


def _speculation_args(b: argparse.ArgumentParser) -> None:
    """SPEX's switches: T1, T2, T3 and what holds speculation back."""
    b.add_argument(
        "--mode",
        choices=[*MODES, "compare"],
        default="baseline",
        help="baseline: plain search; spex: with speculation; compare: both, side by side",
    )
    b.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="compare: pairs of baseline and SPEX, interleaved (the speedup's 95%% interval over them)",
    )
    b.add_argument(
        "--oracle",
        action="store_true",
        help="compare: SPEX speculates the baseline's final trees (the bound of lossless speculation)",
    )
    b.add_argument(
        "--predictor",
        choices=list(PREDICTORS),
        default="auto",
        help="what chooses the speculative work: the search's own hooks (algorithm), the search replayed "
        "ahead under guessed rewards (lookahead), or auto: its own hooks where they predict better, else the "
        "look-ahead (rStar and searches without hooks)",
    )
    b.add_argument("--no-t1", action="store_true", help="no intra-query speculation")
    b.add_argument(
        "--no-t2",
        action="store_true",
        help="split the speculative pool evenly across queries, not by T2's value",
    )
    b.add_argument("--early-stop", action="store_true", help="T3: stop a search once its answer is settled")
    b.add_argument("--early-stop-alpha", type=float, default=0.5, help="T3 margin scale α")
    b.add_argument("--early-stop-min", type=int, default=None, help="T3 minimum answers t")
    b.add_argument("--early-stop-weight", choices=["min", "last"], default="min", help="T3 answer weight")
    b.add_argument(
        "--early-stop-runner-up", choices=["zero", "leader"], default="zero", help="T3 avg(w_2nd) alone"
    )
    b.add_argument(
        "--early-stop-threshold", choices=["artifact", "quarter"], default="artifact", help="T3 progress rule"
    )
    b.add_argument("--early-stop-median", type=float, default=None, help="T3 median gate θ (default off)")
    b.add_argument("--max-amplification", type=float, default=None, help="cap on generated/consumed tokens")
    b.add_argument("--k-total", type=int, default=None, help="static concurrency cap (default: roofline)")
    b.add_argument(
        "--tpot-target",
        type=float,
        default=0.05,
        help="primary TPOT growth speculation is held to (0.05 = +5%%)",
    )
    b.add_argument(
        "--tpot-slack", type=float, default=None, help="a fixed roofline slack instead of the target"
    )
    b.add_argument(
        "--no-tpot-budget",
        dest="tpot_budget",
        action="store_false",
        help="no TPOT budget: speculation takes whatever the KV pool holds (the T2 ablation's floor)",
    )
    b.add_argument(
        "--scheduling",
        choices=list(SCHEDULINGS),
        default="sglang",
        help="sim engine: sglang (priority admission only) or paused (per-step pausing too)",
    )
    b.add_argument(
        "--objective",
        choices=list(OBJECTIVES),
        default="slo",
        help="what speculation is admitted for: slo (primary TPOT within --tpot-target, the serving "
        "default) or throughput (expected useful tokens per second: offline searches)",
    )


def _driver_args(b: argparse.ArgumentParser) -> None:
    """Which driver runs the workload (one run, the grid, the services, the affinity bench)."""
    b.add_argument(
        "--grid", action="store_true", help="run the SPEX paper's main figure (Fig. 10) and ablations"
    )
    b.add_argument("--distributed", action="store_true", help="run through the real services (sim engine)")
    b.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="--distributed: wall s per simulated s (default: measured)",
    )
    b.add_argument("--grid-questions", type=int, default=32, help="questions per grid cell")
    b.add_argument("--workers", type=int, default=1, help="generator workers, one simulated engine each")
    b.add_argument(
        "--routing", choices=["affinity", "least-loaded"], default="affinity", help="where a query's jobs go"
    )
    b.add_argument("--worker-slots", type=int, default=0, help="jobs per worker before spilling (0: no cap)")
    b.add_argument(
        "--affinity-bench",
        action="store_true",
        help="--workers N, affinity routing on and off side by side (--distributed: the services too)",
    )
    b.add_argument("--grid-out", default="docs", help="where the grid writes results and plots")
    b.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    b.add_argument("--list-knobs", action="store_true", help="print the workload knobs and exit")
    b.add_argument("--quiet", action="store_true", help="no progress bar or table")


def _engine_args(b: argparse.ArgumentParser) -> None:
    """The engine and the content: the simulated GPU, or a real model on real questions."""
    b.add_argument(
        "--engine",
        choices=list(ENGINES),
        default="sim",
        help="sim (the simulated GPU), hf (in process), or a live vllm or sglang server (--engine-url)",
    )
    b.add_argument("--engine-url", default=None, help="vllm, sglang: the server's URL")
    b.add_argument(
        "--prm-url",
        default=None,
        help="vllm, sglang: a reward server (SGLang --is-embedding, vLLM --runner pooling: --prm-engine)",
    )
    b.add_argument(
        "--model",
        default=None,
        help="hf: the generator's model directory; vllm, sglang: the served model's (its chat template)",
    )
    b.add_argument("--prm", default=None, help="a local reward-model directory (default: the simulated PRM)")
    b.add_argument("--prm-engine", choices=list(SERVERS), default="sglang", help="the server at --prm-url")
    b.add_argument(
        "--prm-kind",
        choices=list(PRM_KINDS),
        default="token-classification",
        help="the reward model's family: token-classification, step-tag (Qwen2ForProcessRewardModel) or "
        "plus-minus (a causal LM's +/- logits: Math-Shepherd, RLHFlow)",
    )
    b.add_argument(
        "--prm-step-tag", default="", help="step-tag, plus-minus: the tag (default `<extra_0>`, `ки`)"
    )
    b.add_argument("--prm-tokens", default="+,-", help="plus-minus: the good and bad tokens, GOOD,BAD")
    b.add_argument("--prm-chat", action="store_true", help="plus-minus: RLHFlow's chat layout")
    b.add_argument(
        "--dataset", default=None, help="real content: a JSONL file, or a shipped set: math500, easy"
    )
    b.add_argument("--level", type=int, default=None, help="real content: the dataset's questions of a level")
    b.add_argument(
        "--content", choices=list(CONTENTS), default=None, help="default: real with --dataset, else synthetic"
    )
    b.add_argument("--deterministic", action="store_true", help="hf: batch-invariant outputs (lossless)")
    b.add_argument("--max-running", type=int, default=16, help="hf: sequences decoded together")
    b.add_argument(
        "--sampling-temperature",
        type=float,
        default=DEFAULT_TEMPERATURE,
        help=f"real content: sampling temperature (default {DEFAULT_TEMPERATURE}; 0 is greedy)",
    )
    b.add_argument("--device", default="cpu", help="hf: torch device (cuda on a GPU machine)")
    b.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="",
        help="hf: weights and KV (default: as saved; bfloat16 on a GPU)",
    )
    b.add_argument(
        "--no-cuda-graphs",
        dest="cuda_graphs",
        action="store_false",
        help="hf on CUDA: decode passes run eagerly",
    )
    b.add_argument(
        "--profile-file",
        default=None,
        help="a curve from `spex profile --json`: a real engine budgets speculation by it at --tpot-target; "
        "the sim engine steps as it says",
    )
    b.add_argument(
        "--step-split", choices=list(SPLITS), default=DEFAULT_SPLIT, help="real content: where a step ends"
    )
    b.add_argument(
        "--prompt-preset",
        choices=list(PROMPT_PRESETS),
        default="spex",
        help="real content: spex (SPEX's prompt) or search-and-learn (its system prompt, blank-line steps)",
    )
    b.add_argument("--system-prompt", default="", help="real content: the system turn (default the preset's)")
    b.add_argument(
        "--chat-template",
        default="",
        help="real content: the generator's chat template (Jinja, or a file of it) for its tokenizer's",
    )
    b.add_argument("--step-delimiter", default="", help="real content: what ends a step (default: the split)")
    b.add_argument(
        "--min-step-tokens",
        type=int,
        default=0,
        help="real content: a shorter step goes on past its delimiter",
    )
    b.add_argument(
        "--max-step-tokens", type=int, default=None, help="a step's token cap (the knob step_token_cap)"
    )


def parse_mix(text: str | None) -> tuple[tuple[str, int], ...]:
    """`rebase-16,rstar-10` -> (("rebase", 16), ("rstar", 10)); a bad item names itself."""
    out = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, target = item.strip().rpartition("-")
        if not name or not target.isdigit():
            raise ValueError(f"mix: {item.strip()!r} is not ALGORITHM-TARGET (e.g. rebase-16)")
        out.append((name, int(target)))
    return tuple(out)


def _knobs(args: argparse.Namespace) -> WorkloadKnobs:
    cap = [] if args.max_step_tokens is None else [f"step_token_cap={args.max_step_tokens}"]
    return load_knobs(args.workload, [*(args.set or []), *cap])


def bench_config(args: argparse.Namespace) -> BenchConfig:
    """The run `spex bench`'s flags describe (`--mode compare`: the spex run; its baseline is a copy)."""
    from spex.bench.vtime import BenchConfig

    return BenchConfig(
        algorithm=args.algorithm,
        target=args.target,
        batch_size=args.batch_size,
        questions=args.questions,
        seed=args.seed,
        profile=args.profile,
        reward_profile=args.reward_profile,
        reward=args.reward,
        answer_selection=args.answer_selection,
        knobs=_knobs(args),
        params=preset_params(args.algorithm, args.preset, parse_params(args.param)),
        mode="spex" if args.mode == "compare" else args.mode,
        t1=not args.no_t1,
        t2=not args.no_t2,
        early_stop=EarlyStop(
            args.early_stop,
            args.early_stop_alpha,
            args.early_stop_min,
            args.early_stop_median,
            args.early_stop_weight,
            args.early_stop_runner_up,
            args.early_stop_threshold,
        ),
        max_amplification=args.max_amplification,
        k_total=args.k_total,
        tpot_target=args.tpot_target,
        tpot_slack=args.tpot_slack,
        tpot_budget=args.tpot_budget,
        scheduling=args.scheduling,
        objective=args.objective,
        predictor=args.predictor,
        backend=args.engine,
        model=args.model,
        prm=args.prm,
        engine_url=args.engine_url,
        prm_url=args.prm_url,
        prm_engine=args.prm_engine,
        prm_kind=args.prm_kind,
        prm_step_tag=args.prm_step_tag,
        prm_tokens=RewardFormat.parse_tokens(args.prm_tokens),
        prm_chat=args.prm_chat,
        prompt_preset=args.prompt_preset,
        system_prompt=args.system_prompt,
        chat_template=args.chat_template,
        step_delimiter=args.step_delimiter,
        content=args.content or ("real" if args.dataset else "synthetic"),
        dataset=args.dataset,
        level=args.level,
        deterministic=args.deterministic,
        max_running=args.max_running,
        sampling_temperature=args.sampling_temperature,
        step_split=args.step_split,
        min_step_tokens=args.min_step_tokens,
        device=args.device,
        dtype=args.dtype,
        cuda_graphs=args.cuda_graphs,
        profile_file=args.profile_file,
        workers=args.workers,
        affinity=args.routing == "affinity",
        worker_slots=args.worker_slots,
        mix=parse_mix(args.mix),
    )
