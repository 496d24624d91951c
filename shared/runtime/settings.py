"""Settings: every environment variable in one registry, one frozen object per service.

No module reads `os.environ` on its own; entry points call `Settings.from_env()` once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

from spex.proto import ALGORITHMS, CONTENTS, MAX_MESSAGE_BYTES, SPLITS, Content, Limits, Split
from spex.shared.content.prompts import DEFAULT_SPLIT, DEFAULT_TEMPERATURE
from spex.shared.engine.api import ENGINES, SERVERS, EngineName
from spex.shared.roofline.admission import OBJECTIVES, Objective

__all__ = ["ENV", "Settings", "parse_targets", "without_password"]

DEFAULT_MAX_TARGET = 256
DTYPES = ("", "float32", "bfloat16")  # hf: "" keeps the saved one

# name -> (Settings field, meaning)
ENV: dict[str, tuple[str, str]] = {
    "SPEX_REDIS_URL": ("redis_url", "Redis URL (redis://host:port/db)"),
    "SPEX_REDIS_CLUSTER": ("redis_cluster", "1: SPEX_REDIS_URL is a seed node of a Redis/Valkey Cluster"),
    "SPEX_PARTITIONS": ("partitions", "parts each global stream is split into (on a cluster: ≥ 4 per shard)"),
    "SPEX_CONSUMER": ("consumer", "stable consumer name of this process (default: host-pid)"),
    "SPEX_TIME_SCALE": ("time_scale", "wall seconds per simulated GPU second (sim engine)"),
    "SPEX_PROFILE": ("profile", "generator profile MODEL@GPU (sim engine)"),
    "SPEX_REWARD_PROFILE": ("reward_profile", "reward model profile MODEL@GPU (sim scorer)"),
    "SPEX_MAX_DELIVERIES": ("max_deliveries", "deliveries before a message is dead-lettered"),
    "SPEX_HEARTBEAT_S": ("heartbeat_s", "heartbeat period of long jobs, seconds"),
    "SPEX_LEASE_S": ("lease_s", "coordinator lease on a query, seconds"),
    "SPEX_BLOCK_MS": ("block_ms", "longest blocking read, milliseconds (≤ socket timeout)"),
    "SPEX_BACKLOG_LIMIT": ("backlog_limit", "ingress backlog above which submissions are refused"),
    "SPEX_TPOT_TARGET": ("tpot_target", "primary TPOT growth speculation is held to (0.05 = +5%)"),
    "SPEX_TPOT_SLACK": ("tpot_slack", "roofline slack the governor starts from (0.10 = 10%)"),
    "SPEX_OBJECTIVE": (
        "objective",
        "what speculation is admitted for: slo (primary TPOT within SPEX_TPOT_TARGET) or throughput "
        "(expected useful tokens per second, for offline searches)",
    ),
    "SPEX_PROFILE_FILE": (
        "profile_file",
        "a real engine's step curve from `spex profile --json`, which its generator publishes for the "
        "allocator (empty: the in-process engine's is measured at its start, cached)",
    ),
    "SPEX_STARTUP_SWEEP": (
        "startup_sweep",
        "1: the in-process engine with no SPEX_PROFILE_FILE measures its step curve at start "
        "(cached); 0: the catalog's SPEX_PROFILE budgets it",
    ),
    "SPEX_TPOT_FIXED": ("tpot_fixed", "1: keep SPEX_TPOT_SLACK fixed instead of steering it"),
    "SPEX_OTLP_ENDPOINT": ("otlp_endpoint", "send OpenTelemetry spans to this OTLP/HTTP collector"),
    "SPEX_TREE_EVENTS": ("tree_events", "1: coordinators publish each query's tree as it grows (0: off)"),
    "SPEX_METRICS_PORT": ("metrics_port", "Prometheus /metrics port of this process (0: off)"),
    "SPEX_HTTP_PORT": ("http_port", "port of the HTTP ingress (spex worker ingress)"),
    "SPEX_LOG_LEVEL": ("log_level", "debug | info | warning | error"),
    "SPEX_ENGINE": ("engine", "engine: sim | hf (in process) | vllm | sglang (a server)"),
    "SPEX_ENGINE_URL": ("engine_url", "vllm/sglang: the serving engine's base URL (one per generator)"),
    "SPEX_PRM_URL": ("prm_url", "scorer: an SGLang server of the reward model (else SPEX_PRM in process)"),
    "SPEX_ENGINE_TIMEOUT_S": ("engine_timeout_s", "vllm/sglang: longest one request may take, seconds"),
    "SPEX_MODEL": ("model", "hf: the generator's model directory; vllm/sglang: its tokenizer"),
    "SPEX_PRM": ("prm", "hf: the reward model's local directory (empty: simulated PRM)"),
    "SPEX_CONTENT": ("content", "synthetic (the workload's tree) | real (the model's text)"),
    "SPEX_SAMPLING_TEMPERATURE": ("sampling_temperature", "real content: sampling temperature (0: greedy)"),
    "SPEX_DETERMINISTIC": ("deterministic", "hf: batch-invariant outputs, 1 or 0"),
    "SPEX_MAX_RUNNING": ("max_running", "hf: sequences a generator decodes together"),
    "SPEX_MAX_STEP_TOKENS": ("max_step_tokens", "longest step a search asks for, tokens"),
    "SPEX_STEP_SPLIT": ("step_split", "real content: where a step ends: blank-line | newline | numbered"),
    "SPEX_MIN_STEP_TOKENS": ("min_step_tokens", "real content: a shorter step goes on past its delimiter"),
    "SPEX_MAX_DEPTH": ("max_depth", "deepest step a search goes to (0: the algorithm's default)"),
    "SPEX_DEVICE": ("device", "hf: torch device (cpu, cuda)"),
    "SPEX_DTYPE": ("dtype", "hf: weights and KV, float32 or bfloat16 (default: as saved; bf16 on a GPU)"),
    "SPEX_CUDA_GRAPHS": ("cuda_graphs", "hf on CUDA: replay decode passes from CUDA graphs, 1 or 0"),
    "SPEX_AFFINITY": ("affinity", "route a query's jobs to one worker by consistent hashing, 1 or 0"),
    "SPEX_WORKER_SLOTS": ("worker_slots", "jobs a generator worker takes at once (its saturation point)"),
    # Security and limits.
    "SPEX_REDIS_PASSWORD": ("redis_password", "Redis password (never put it in the URL)"),
    "SPEX_REDIS_PASSWORD_FILE": ("redis_password_file", "file holding the Redis password"),
    "SPEX_REDIS_CA": ("redis_ca", "rediss://: CA bundle that signed the server's certificate"),
    "SPEX_REDIS_CERT": ("redis_cert", "rediss://: client certificate (mutual TLS)"),
    "SPEX_REDIS_KEY": ("redis_key", "rediss://: client certificate's private key"),
    "SPEX_HTTP_HOST": ("http_host", "address the HTTP ingress binds (default loopback only)"),
    "SPEX_AUTH_TOKENS": ("auth_tokens", "ingress bearer tokens, NAME=TOKEN,... (empty: no auth)"),
    "SPEX_AUTH_TOKENS_FILE": ("auth_tokens_file", "file of ingress bearer tokens, one NAME TOKEN per line"),
    "SPEX_MAX_QUESTION_CHARS": ("max_question_chars", "longest question accepted, characters"),
    "SPEX_MAX_TARGET": ("max_target", "largest target: N for every algorithm, or ALGO=N,..."),
    "SPEX_CLIENT_IN_FLIGHT": ("client_in_flight", "questions one client may have in flight"),
    "SPEX_MAX_MESSAGE_BYTES": ("max_message_bytes", "largest HTTP body and wire message, bytes"),
    "SPEX_RESULT_TTL_S": ("result_ttl_s", "how long an answered query's keys are kept, seconds"),
}


# What the numeric checks in `Settings.__post_init__` allow, for the error that names them.
RANGES = {
    "time_scale": "above 0, at most 1000",
    "max_deliveries": "1 to 1000",
    "heartbeat_s": "0.01 to 600",
    "lease_s": "above SPEX_HEARTBEAT_S, at most 3600",
    "block_ms": "1 to 2000",
    "backlog_limit": "1 to 10,000,000",
    "tpot_slack": "0 to 100",
    "tpot_target": "0 to 10",
    "objective": " or ".join(OBJECTIVES),
    "engine": " | ".join(ENGINES),
    "profile_file": "a file that exists",
    "engine_timeout_s": "1 to 86,400",
    "worker_slots": "1 to 4096",
    "sampling_temperature": "0 to 10",
    "max_running": "1 to 4096",
    "max_step_tokens": "1 to 131,072",
    "min_step_tokens": "0 up to SPEX_MAX_STEP_TOKENS",
    "max_depth": "0 to 10,000",
    "max_question_chars": "1 to 1,000,000",
    "client_in_flight": "1 to 10,000,000",
    "result_ttl_s": "1 to a year in seconds",
    "partitions": "1 to 16,384; at least 2 with SPEX_REDIS_CLUSTER",
}


@dataclass(frozen=True)
class Settings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_cluster: bool = False
    partitions: int = 1
    consumer: str = ""
    time_scale: float = 0.02
    profile: str = "Llemma-7B@A6000"
    reward_profile: str = "Llemma-7B@A6000"
    max_deliveries: int = 3
    heartbeat_s: float = 1.0
    lease_s: float = 3.0
    block_ms: int = 100
    backlog_limit: int = 10_000
    tpot_target: float = 0.05
    tpot_slack: float = 0.10
    tpot_fixed: bool = False
    objective: Objective = "slo"
    profile_file: str = ""
    startup_sweep: bool = True
    tree_events: bool = True
    otlp_endpoint: str = ""
    metrics_port: int = 0
    http_port: int = 8080
    log_level: str = "info"
    engine: EngineName = "sim"
    engine_url: str = ""
    prm_url: str = ""
    engine_timeout_s: float = 600.0
    model: str = ""
    prm: str = ""
    content: Content = "synthetic"
    sampling_temperature: float = DEFAULT_TEMPERATURE
    deterministic: bool = False
    max_running: int = 16
    max_step_tokens: int = 256
    step_split: Split = DEFAULT_SPLIT
    min_step_tokens: int = 0
    max_depth: int = 0
    device: str = "cpu"
    dtype: str = ""  # hf: "" keeps the saved dtype (bfloat16 on a GPU)
    cuda_graphs: bool = True
    affinity: bool = True
    worker_slots: int = 128
    redis_password: str = field(default="", repr=False)
    redis_password_file: str = ""
    redis_ca: str = ""
    redis_cert: str = ""
    redis_key: str = ""
    http_host: str = "127.0.0.1"
    auth_tokens: str = field(default="", repr=False)
    auth_tokens_file: str = ""
    max_question_chars: int = 100_000
    max_target: str = "256"
    client_in_flight: int = 1_000
    max_message_bytes: int = MAX_MESSAGE_BYTES
    result_ttl_s: int = 86_400

    def __post_init__(self) -> None:
        if not self.consumer:
            object.__setattr__(self, "consumer", f"{socket.gethostname()}-{os.getpid()}")
        # Every number has both bounds: an infinite time scale or timeout, or a heartbeat of a
        # nanosecond, is a typo that would hang or spin a service, not a setting.
        checks = {
            "time_scale": 0 < self.time_scale <= 1000,
            "max_deliveries": 1 <= self.max_deliveries <= 1000,
            "heartbeat_s": 0.01 <= self.heartbeat_s <= 600,
            "lease_s": self.heartbeat_s < self.lease_s <= 3600,
            "block_ms": 1 <= self.block_ms <= 2000,
            "backlog_limit": 1 <= self.backlog_limit <= 10_000_000,
            "tpot_slack": 0 <= self.tpot_slack <= 100,
            "tpot_target": 0 <= self.tpot_target <= 10,
            "objective": self.objective in OBJECTIVES,
            "profile_file": not self.profile_file or os.path.isfile(self.profile_file),
            "metrics_port": 0 <= self.metrics_port < 65536,
            "http_port": 0 < self.http_port < 65536,
            "log_level": self.log_level in ("debug", "info", "warning", "error"),
            "redis_url": self.redis_url.startswith(("redis://", "rediss://", "unix://")),
            # On a cluster the global streams need parts (one part is one slot, one shard).
            "partitions": (2 if self.redis_cluster else 1) <= self.partitions <= 16_384,
            "engine": self.engine in ENGINES,
            "engine_url": self.engine not in SERVERS or _http(self.engine_url),
            "engine_timeout_s": 1 <= self.engine_timeout_s <= 86_400,
            # A served reward model: its URL, and SPEX_PRM for its tokenizer (and the prm reward).
            "prm_url": not self.prm_url or (_http(self.prm_url) and bool(self.prm)),
            "model": self.engine != "hf" or bool(self.model),
            "worker_slots": 1 <= self.worker_slots <= 4096,
            "content": self.content in CONTENTS,  # generators refuse what they cannot write
            "sampling_temperature": 0 <= self.sampling_temperature <= 10,
            "dtype": self.dtype in DTYPES,
            "max_running": 1 <= self.max_running <= 4096,
            "max_step_tokens": 1 <= self.max_step_tokens <= 131_072,
            "step_split": self.step_split in SPLITS,
            "min_step_tokens": 0 <= self.min_step_tokens < self.max_step_tokens,
            "max_depth": 0 <= self.max_depth <= 10_000,
            "max_question_chars": 1 <= self.max_question_chars <= 1_000_000,
            "max_target": _targets_ok(self.max_target),
            "client_in_flight": 1 <= self.client_in_flight <= 10_000_000,
            "max_message_bytes": 1024 <= self.max_message_bytes <= MAX_MESSAGE_BYTES,
            "result_ttl_s": 1 <= self.result_ttl_s <= 365 * 86_400,
            "http_host": bool(self.http_host),
            "otlp_endpoint": not self.otlp_endpoint or _http(self.otlp_endpoint),
        }
        for name, ok in checks.items():
            if not ok:
                env = next(k for k, (f, _) in ENV.items() if f == name)
                value = getattr(self, name)
                if name == "redis_url":  # never echo a password someone put in the URL
                    value = without_password(str(value))
                allowed = f"; {RANGES[name]}" if name in RANGES else ""
                raise ValueError(f"{env} ({name}): invalid value {value!r}{allowed}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from the environment, then explicit overrides; a bad value raises a
        one-line ValueError naming the variable."""
        env = os.environ if env is None else env
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for name, (field_name, _) in ENV.items():
            if name in env:
                kinds: dict[str, Callable[[str], object]] = {"float": float, "int": int, "bool": _flag}
                kind = kinds.get(str(types[field_name]), str)
                try:
                    values[field_name] = kind(env[name])
                except ValueError:
                    what = getattr(kind, "__name__", "value")
                    raise ValueError(f"{name}: {env[name]!r} is not a {what}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    @property
    def limits(self) -> Limits:
        """The submission limits these settings set (the ingress and coordinator share them)."""
        return Limits(self.max_question_chars, parse_targets(self.max_target), self.client_in_flight)

    def password(self) -> str:
        """The Redis password: SPEX_REDIS_PASSWORD, else the first line of the password file."""
        if self.redis_password or not self.redis_password_file:
            return self.redis_password
        with open(self.redis_password_file) as f:
            return f.readline().strip()


def without_password(url: str) -> str:
    """`url` without the credentials someone may have put in it (for messages and logs)."""
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}" if "@" in host else url


def parse_targets(raw: str) -> dict[str, int]:
    """`256` (every algorithm) or `rebase=256,rstar=64` (the rest unbounded by name: 256)."""
    raw = raw.strip()
    if "=" not in raw:
        return dict.fromkeys(ALGORITHMS, int(raw))
    out: dict[str, int] = dict.fromkeys(ALGORITHMS, DEFAULT_MAX_TARGET)
    for item in raw.split(","):
        name, _, value = item.partition("=")
        if name.strip() not in ALGORITHMS:
            raise ValueError(name)
        out[name.strip()] = int(value)
    return out


def _http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def _targets_ok(raw: str) -> bool:
    try:
        return all(v >= 1 for v in parse_targets(raw).values())
    except ValueError:
        return False


def _flag(raw: str) -> bool:
    """A boolean variable: 1/true/yes or 0/false/no."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no", ""):
        return False
    raise ValueError(raw)


_flag.__name__ = "flag (1 or 0)"
