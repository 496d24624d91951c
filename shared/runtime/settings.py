"""Settings: every environment variable in one registry, one frozen object per service.

Each setting is one row, a field of `Settings` declared with `setting(...)` (settings_schema.py):
its type, default, variable, meaning and check. The registry of variables (`ENV`), the texts of
what each check allows (`RANGES`), the environment reader and its errors are read off the rows.
No module reads `os.environ` on its own; entry points call `Settings.from_env()` once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Literal

from spex.proto import CONTENTS, SPLITS, Content, Limits, Split
from spex.proto.messages import Reward
from spex.shared.content.prompts import DEFAULT_SPLIT, DEFAULT_TEMPERATURE
from spex.shared.core.speculation import PREDICTORS, PredictorName
from spex.shared.engine.api import ENGINES, SERVERS, EngineName, ServerName
from spex.shared.roofline.admission import OBJECTIVES, Objective
from spex.shared.runtime.settings_content import ContentSettings
from spex.shared.runtime.settings_ingress import IngressSettings
from spex.shared.runtime.settings_schema import read_env, row, setting
from spex.shared.runtime.settings_values import (
    http,
    limits_of,
    parse_targets,
    reward_ok,
    urls,
    without_password,
)

__all__ = ["ENV", "RANGES", "Settings", "parse_targets", "urls", "without_password"]

DTYPES = ("", "float32", "bfloat16")  # hf: "" keeps the saved one
RewardSetting = Literal["", Reward]  # "": settled by the content and the reward model (`step_reward`)
LOG_LEVELS = ("debug", "info", "warning", "error")


# Every number has both bounds: an infinite time scale or timeout, or a heartbeat of a nanosecond,
# is a typo that would hang or spin a service, not a setting. A check sees the value, then the
# settings (for the few that relate two); `__post_init__` runs them in this order.
@dataclass(frozen=True)
class Settings(ContentSettings, IngressSettings):
    redis_url: str = setting(
        "redis://127.0.0.1:6379/0",
        env="SPEX_REDIS_URL",
        help="Redis URL (redis://host:port/db)",
        check=lambda v, _: v.startswith(("redis://", "rediss://", "unix://")),
    )
    redis_cluster: bool = setting(
        False, env="SPEX_REDIS_CLUSTER", help="1: SPEX_REDIS_URL is a seed node of a Redis/Valkey Cluster"
    )
    # On a cluster the global streams need parts (one part is one slot, one shard).
    partitions: int = setting(
        1,
        env="SPEX_PARTITIONS",
        help="parts each global stream is split into (on a cluster: ≥ 4 per shard)",
        check=lambda v, s: (2 if s.redis_cluster else 1) <= v <= 16_384,
        allowed="1 to 16,384; at least 2 with SPEX_REDIS_CLUSTER",
    )
    consumer: str = setting(
        "", env="SPEX_CONSUMER", help="stable consumer name of this process (empty: host-pid)"
    )
    time_scale: float = setting(
        0.02,
        env="SPEX_TIME_SCALE",
        help="wall seconds per simulated GPU second (sim engine)",
        check=lambda v, _: 0 < v <= 1000,
        allowed="above 0, at most 1000",
    )
    profile: str = setting(
        "Llemma-7B@A6000", env="SPEX_PROFILE", help="generator profile MODEL@GPU (sim engine)"
    )
    reward_profile: str = setting(
        "Llemma-7B@A6000", env="SPEX_REWARD_PROFILE", help="reward model profile MODEL@GPU (sim scorer)"
    )
    max_deliveries: int = setting(
        3, env="SPEX_MAX_DELIVERIES", help="deliveries before a message is dead-lettered", within=(1, 1000)
    )
    heartbeat_s: float = setting(
        1.0, env="SPEX_HEARTBEAT_S", help="heartbeat period of long jobs, seconds", within=(0.01, 600)
    )
    lease_s: float = setting(
        3.0,
        env="SPEX_LEASE_S",
        help="coordinator lease on a query, seconds",
        check=lambda v, s: s.heartbeat_s < v <= 3600,
        allowed="above SPEX_HEARTBEAT_S, at most 3600",
    )
    block_ms: int = setting(
        100,
        env="SPEX_BLOCK_MS",
        help="longest blocking read, milliseconds (≤ socket timeout)",
        within=(1, 2000),
    )
    backlog_limit: int = setting(
        10_000,
        env="SPEX_BACKLOG_LIMIT",
        help="ingress backlog above which submissions are refused",
        within=(1, 10_000_000),
    )
    tpot_target: float = setting(
        0.05,
        env="SPEX_TPOT_TARGET",
        help="primary TPOT growth speculation is held to (0.05 = +5%)",
        within=(0, 10),
    )
    tpot_slack: float = setting(
        0.10,
        env="SPEX_TPOT_SLACK",
        help="roofline slack the governor starts from (0.10 = 10%)",
        within=(0, 100),
    )
    objective: Objective = setting(
        "slo",
        env="SPEX_OBJECTIVE",
        help="what speculation is admitted for: slo (primary TPOT within SPEX_TPOT_TARGET) or throughput "
        "(expected useful tokens per second, for offline searches)",
        check=lambda v, _: v in OBJECTIVES,
        allowed=" or ".join(OBJECTIVES),
    )
    predictor: PredictorName = setting(
        "auto",
        env="SPEX_PREDICTOR",
        help="what chooses a query's speculative work: algorithm (the search's own hooks), lookahead (the "
        "search replayed ahead under guessed rewards), or auto (its own hooks where it has them and they "
        "predict better, else the look-ahead: rStar and searches without hooks get the look-ahead)",
        check=lambda v, _: v in PREDICTORS,
        allowed=", ".join(PREDICTORS),
    )
    profile_file: str = setting(
        "",
        env="SPEX_PROFILE_FILE",
        help="a real engine's step curve from `spex profile --json`, which its generator publishes for the "
        "allocator (empty: the in-process engine's is measured at its start, cached; a server's is the "
        "catalog's SPEX_PROFILE)",
        check=lambda v, _: not v or os.path.isfile(v),
        allowed="a file that exists",
    )
    startup_sweep: bool = setting(
        True,
        env="SPEX_STARTUP_SWEEP",
        help="1: the in-process engine with no SPEX_PROFILE_FILE measures its step curve at start "
        "(cached); 0: the catalog's SPEX_PROFILE budgets it",
    )
    tpot_fixed: bool = setting(
        False, env="SPEX_TPOT_FIXED", help="1: keep SPEX_TPOT_SLACK fixed instead of steering it"
    )
    otlp_endpoint: str = setting(
        "",
        env="SPEX_OTLP_ENDPOINT",
        help="send OpenTelemetry spans to this OTLP/HTTP collector",
        check=lambda v, _: not v or http(v),
    )
    tree_events: bool = setting(
        True, env="SPEX_TREE_EVENTS", help="1: coordinators publish each query's tree as it grows (0: off)"
    )
    metrics_port: int = setting(
        0,
        env="SPEX_METRICS_PORT",
        help="Prometheus /metrics port of this process (0: off; the compose file and the manifests give "
        "8700, clear of vLLM's 8000, the ingress's 8080, Prometheus's 9090 and the exporters' 9100-9999)",
        check=lambda v, _: 0 <= v < 65536,
    )
    log_level: str = setting(
        "info",
        env="SPEX_LOG_LEVEL",
        help="debug | info | warning | error",
        check=lambda v, _: v in LOG_LEVELS,
    )
    engine: EngineName = setting(
        "sim",
        env="SPEX_ENGINE",
        help="engine: sim | hf (in process) | vllm | sglang (a server)",
        check=lambda v, _: v in ENGINES,
        allowed=" | ".join(ENGINES),
    )
    engine_url: str = setting(
        "",
        env="SPEX_ENGINE_URL",
        help="vllm/sglang: the server's base URL; spex up: one generator per URL (A,B: a replica each), "
        "or one URL for every generator (a Service that balances requests over replicas)",
        check=lambda v, s: s.engine not in SERVERS or (bool(urls(v)) and all(http(u) for u in urls(v))),
        allowed="http:// or https:// URLs, comma-separated",
    )
    engine_timeout_s: float = setting(
        600.0,
        env="SPEX_ENGINE_TIMEOUT_S",
        help="vllm/sglang: longest one request may take, seconds",
        within=(1, 86_400),
    )
    # A server loads its weights and captures its CUDA graphs before it answers: minutes, not
    # the seconds every other service takes to start.
    engine_wait_s: float = setting(
        900.0,
        env="SPEX_ENGINE_WAIT_S",
        help="vllm/sglang: how long a generator waits at start for its server to answer, seconds "
        "(`spex up` waits as long for a service that waits on a server)",
        within=(1, 86_400),
    )
    model: str = setting(
        "",
        env="SPEX_MODEL",
        help="hf: the generator's model directory; vllm/sglang: its tokenizer",
        check=lambda v, s: s.engine != "hf" or bool(v),
    )
    content: Content = setting(
        "synthetic",
        env="SPEX_CONTENT",
        help="synthetic (the workload's tree) | real (the model's text)",
        check=lambda v, _: v in CONTENTS,  # generators refuse what they cannot write
    )
    # What rewards a step: read through `step_reward`, which settles the empty default.
    reward: RewardSetting = setting(
        "",
        env="SPEX_REWARD",
        help="what rewards a step on real content: logprob (the generator's own log-probabilities) or prm "
        "(a reward model: SPEX_PRM in process or SPEX_PRM_URL served); synthetic content is rewarded by "
        "the simulated PRM (empty: prm when a reward model is given, else logprob on real content)",
        check=reward_ok,
        allowed="logprob (real content only) or prm (on real content with a reward model: SPEX_PRM or "
        "SPEX_PRM_URL, spex up --prm DIR or --prm-url URL)",
    )
    prm: str = setting(
        "",
        env="SPEX_PRM",
        help="the reward model's local directory, run in process; with SPEX_PRM_URL, its tokenizer (the "
        "chat template its prompts are written in)",
    )
    prm_url: str = setting(
        "",
        env="SPEX_PRM_URL",
        help="the reward model served at this URL (by SPEX_PRM_ENGINE) instead of in process: one URL "
        "(a Service in front of several replicas)",
        check=lambda v, _: not v or (len(urls(v)) == 1 and http(v)),
        allowed="one http:// or https:// URL",
    )
    prm_engine: ServerName = setting(
        "sglang",
        env="SPEX_PRM_ENGINE",
        help="the server at SPEX_PRM_URL: sglang (/classify, launched with --is-embedding) or vllm "
        "(/pooling, launched with --runner pooling)",
        check=lambda v, _: v in SERVERS,
        allowed=" or ".join(SERVERS),
    )
    sampling_temperature: float = setting(
        DEFAULT_TEMPERATURE,
        env="SPEX_SAMPLING_TEMPERATURE",
        help="real content: sampling temperature (0: greedy)",
        within=(0, 10),
    )
    deterministic: bool = setting(False, env="SPEX_DETERMINISTIC", help="hf: batch-invariant outputs")
    max_running: int = setting(
        16, env="SPEX_MAX_RUNNING", help="hf: sequences a generator decodes together", within=(1, 4096)
    )
    max_step_tokens: int = setting(
        256, env="SPEX_MAX_STEP_TOKENS", help="longest step a search asks for, tokens", within=(1, 131_072)
    )
    step_split: Split = setting(
        DEFAULT_SPLIT,
        env="SPEX_STEP_SPLIT",
        help="real content: where a step ends: blank-line | newline | numbered",
        check=lambda v, _: v in SPLITS,
    )
    min_step_tokens: int = setting(
        0,
        env="SPEX_MIN_STEP_TOKENS",
        help="real content: a shorter step goes on past its delimiter",
        check=lambda v, s: 0 <= v < s.max_step_tokens,
        allowed="0 up to SPEX_MAX_STEP_TOKENS",
    )
    max_depth: int = setting(
        0,
        env="SPEX_MAX_DEPTH",
        help="deepest step a search goes to (0: the algorithm's default)",
        within=(0, 10_000),
    )
    device: str = setting("cpu", env="SPEX_DEVICE", help="hf: torch device (cpu, cuda)")
    dtype: str = setting(
        "",
        env="SPEX_DTYPE",
        help="hf: weights and KV, float32 or bfloat16 (empty: as saved; bf16 on a GPU)",
        check=lambda v, _: v in DTYPES,
    )
    cuda_graphs: bool = setting(
        True, env="SPEX_CUDA_GRAPHS", help="hf on CUDA: replay decode passes from CUDA graphs"
    )
    affinity: bool = setting(
        True, env="SPEX_AFFINITY", help="route a query's jobs to one worker by consistent hashing"
    )
    worker_slots: int = setting(
        128,
        env="SPEX_WORKER_SLOTS",
        help="jobs a generator worker takes at once (its saturation point)",
        within=(1, 4096),
    )
    # Security and limits.
    redis_password: str = setting(
        "", env="SPEX_REDIS_PASSWORD", help="Redis password (never put it in the URL)", secret=True
    )
    redis_password_file: str = setting(
        "", env="SPEX_REDIS_PASSWORD_FILE", help="file holding the Redis password"
    )
    redis_ca: str = setting(
        "", env="SPEX_REDIS_CA", help="rediss://: CA bundle that signed the server's certificate"
    )
    redis_cert: str = setting("", env="SPEX_REDIS_CERT", help="rediss://: client certificate (mutual TLS)")
    redis_key: str = setting("", env="SPEX_REDIS_KEY", help="rediss://: client certificate's private key")
    result_ttl_s: int = setting(
        86_400, env="SPEX_RESULT_TTL_S", help="how long an answered query's keys are kept, seconds",
        check=lambda v, _: 1 <= v <= 365 * 86_400, allowed="1 to a year in seconds",
    )  # fmt: skip
    data_loss_wait_s: float = setting(
        60.0, env="SPEX_DATA_LOSS_WAIT_S", within=(1.0, 3600.0),
        help="after Redis loses its data, the longest a client key not found is refused (503) while the "
        "coordinators store their questions again (they end the wait sooner once all have)",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if not self.consumer:
            object.__setattr__(self, "consumer", f"{socket.gethostname()}-{os.getpid()}")
        for f in fields(self):
            r = row(f)
            value = getattr(self, f.name)
            if r.check is None or r.check(value, self):
                continue
            if f.name == "redis_url":  # never echo a password someone put in the URL
                value = without_password(str(value))
            allowed = f"; {r.allowed}" if r.allowed else ""
            raise ValueError(f"{r.env} ({f.name}): invalid value {value!r}{allowed}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from the environment, then explicit overrides; a bad value raises a
        one-line ValueError naming the variable."""
        values = read_env(cls, os.environ if env is None else env)
        return cls(**(values | {k: v for k, v in overrides.items() if v is not None}))  # type: ignore[arg-type]

    @property
    def step_reward(self) -> Reward:
        """What rewards a step: SPEX_REWARD; when it is empty, the generator's own log-probabilities
        on real content without a reward model, else prm (the reward model, or on synthetic
        content the simulated PRM)."""
        if self.reward:
            return self.reward
        return "logprob" if self.content == "real" and not (self.prm or self.prm_url) else "prm"

    @property
    def limits(self) -> Limits:
        """The submission limits these settings set (the ingress and coordinator share them)."""
        return limits_of(self)

    def password(self) -> str:
        """The Redis password: SPEX_REDIS_PASSWORD, else the first line of the password file."""
        if self.redis_password or not self.redis_password_file:
            return self.redis_password
        with open(self.redis_password_file) as f:
            return f.readline().strip()


# The registry the rows make: variable -> (field, meaning); field -> what its check allows.
ENV: Mapping[str, tuple[str, str]] = {row(f).env: (f.name, row(f).help) for f in fields(Settings)}
RANGES: Mapping[str, str] = {f.name: row(f).allowed for f in fields(Settings) if row(f).allowed}
