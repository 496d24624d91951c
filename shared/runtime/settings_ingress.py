"""The ingress's settings: its HTTP face, who may use it, and the limits a submission is held
to. Rows of `Settings` (settings.py), which extends this class; declared as its rows are."""

from __future__ import annotations

from dataclasses import dataclass

from spex.proto import MAX_MESSAGE_BYTES
from spex.proto.submission import MAX_PROMPT_TOKENS
from spex.shared.runtime.settings_schema import setting
from spex.shared.runtime.settings_values import DEFAULT_MAX_TARGET, plugins_ok, targets_ok

__all__ = ["IngressSettings"]


@dataclass(frozen=True)
class IngressSettings:
    http_port: int = setting(
        8080, env="SPEX_HTTP_PORT", help="port of the HTTP ingress", check=lambda v, _: 0 < v < 65536
    )
    http_redis_connections: int = setting(
        256, env="SPEX_HTTP_REDIS_CONNECTIONS", help="Redis connections the ingress pools", within=(2, 10_000)
    )
    http_streams_per_client: int = setting(
        32,
        env="SPEX_HTTP_STREAMS_PER_CLIENT",
        help="long-lived requests (event streams, chat completions) one client may hold open",
        within=(1, 100_000),
    )
    http_host: str = setting(
        "127.0.0.1",
        env="SPEX_HTTP_HOST",
        help="address the HTTP ingress binds (127.0.0.1: loopback only)",
        check=lambda v, _: bool(v),
    )
    auth_tokens: str = setting(
        "", env="SPEX_AUTH_TOKENS", help="ingress bearer tokens, NAME=TOKEN,... (empty: no auth)", secret=True
    )
    auth_tokens_file: str = setting(
        "", env="SPEX_AUTH_TOKENS_FILE", help="file of ingress bearer tokens, one NAME TOKEN per line"
    )
    operator_token: str = setting(
        "", env="SPEX_OPERATOR_TOKEN", secret=True,
        help="bearer token of the operator's overview (everyone's figures); with client tokens or this "
        "set, anyone else sees only their own",
    )  # fmt: skip
    operator_token_file: str = setting(
        "",
        env="SPEX_OPERATOR_TOKEN_FILE",
        help="file holding the operator's bearer token (SPEX_OPERATOR_TOKEN)",
    )
    max_question_chars: int = setting(
        100_000,
        env="SPEX_MAX_QUESTION_CHARS",
        help="longest question accepted, characters",
        within=(1, 1_000_000),
    )
    max_prompt_tokens: int = setting(
        0,
        env="SPEX_MAX_PROMPT_TOKENS",
        within=(0, MAX_PROMPT_TOKENS),
        help="longest question the generators' engine takes, tokens (0: on sim the profile's KV less the "
        "deepest path, else 131,072); a longer one is refused at submission (400)",
    )
    # Before SPEX_MAX_TARGET, whose check knows the searches these add.
    search_plugins: str = setting(
        "",
        env="SPEX_SEARCH_PLUGINS",
        help="modules of search plug-ins, module[,module…] importable from the Python path, each "
        "registering its searches with spex.search.register (the spex.searches entry points of installed "
        "packages are loaded too); every service needs the same",
        check=plugins_ok,
        allowed="modules that import and register a search",
    )
    max_target: str = setting(
        str(DEFAULT_MAX_TARGET),
        env="SPEX_MAX_TARGET",
        help="largest target: N for every search, or SEARCH=N,... (the rest 256)",
        check=lambda v, _: targets_ok(v),
    )
    client_in_flight: int = setting(
        1_000,
        env="SPEX_CLIENT_IN_FLIGHT",
        help="questions one client may have in flight",
        within=(1, 10_000_000),
    )
    max_message_bytes: int = setting(
        MAX_MESSAGE_BYTES,
        env="SPEX_MAX_MESSAGE_BYTES",
        help="largest HTTP body and wire message, bytes",
        check=lambda v, _: 1024 <= v <= MAX_MESSAGE_BYTES,
    )
    memory_headroom: float = setting(
        0.9,
        env="SPEX_MEMORY_HEADROOM",
        within=(0.05, 1.0),
        help="share of Redis's maxmemory that what it uses and the searches' reserves may fill; a new "
        "question past it is refused (503)",
    )
    memory_per_target: int = setting(
        0,
        env="SPEX_MEMORY_PER_TARGET",
        within=(0, 2**30),
        help="bytes a question's search may hold in Redis a unit of its target, reserved while it is in "
        "flight (0: the measured figure of its algorithm, 18,000-36,000)",
    )
