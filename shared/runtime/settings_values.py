"""What the settings' rows and their readers share: URL lists, the targets' syntax, a URL without
its credentials, and the checks that relate one setting to others (here, so the registry stays a
list of declarations)."""

from __future__ import annotations

from typing import Protocol

from spex.proto import Limits, submission
from spex.shared.core.search import SEARCHES
from spex.shared.core.search.rebase import RebaseParams
from spex.shared.roofline.hardware import parse_profile
from spex.shared.runtime.searches import load_searches, search_checks

__all__ = [
    "DEFAULT_MAX_TARGET",
    "SERVED_PROMPT_TOKENS",
    "engine_prompt_tokens",
    "http",
    "limits_of",
    "parse_targets",
    "plugins_ok",
    "reward_ok",
    "targets_ok",
    "urls",
    "without_password",
]


class Read(Protocol):
    """The settings these checks and values read (`Settings` is one): declared here, so the
    values need not import the registry that declares its rows with them."""

    @property
    def max_question_chars(self) -> int: ...
    @property
    def max_target(self) -> str: ...
    @property
    def client_in_flight(self) -> int: ...
    @property
    def max_prompt_tokens(self) -> int: ...
    @property
    def engine(self) -> str: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def max_step_tokens(self) -> int: ...
    @property
    def profile(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def prm(self) -> str: ...
    @property
    def prm_url(self) -> str: ...


DEFAULT_MAX_TARGET = submission.DEFAULT_MAX_TARGET
# A served engine's (hf, vllm, sglang) bound on a question's tokens, unless SPEX_MAX_PROMPT_TOKENS
# names the model's: a long served context (a model's own is often shorter).
SERVED_PROMPT_TOKENS = 131_072
DEEPEST_PATH_STEPS = RebaseParams().max_depth  # the deepest default search path, in steps


def limits_of(s: Read) -> Limits:
    """The submission limits `s` sets (`Settings.limits`)."""
    return Limits(
        s.max_question_chars,
        parse_targets(s.max_target),
        s.client_in_flight,
        engine_prompt_tokens(s),
        search_checks(),
    )


def engine_prompt_tokens(s: Read) -> int:
    """The longest question (in tokens) the generators' engine takes: SPEX_MAX_PROMPT_TOKENS;
    when it is 0, on the simulated engine the profile's KV pool less the deepest path the
    search may grow under it (its steps at their longest), which the engine must hold too."""
    if s.max_prompt_tokens:
        return s.max_prompt_tokens
    if s.engine != "sim":
        return SERVED_PROMPT_TOKENS
    path = ((s.max_depth or DEEPEST_PATH_STEPS) + 1) * s.max_step_tokens
    return max(1, parse_profile(s.profile).kv_capacity_tokens - path)


def without_password(url: str) -> str:
    """`url` without the credentials someone may have put in it (for messages and logs)."""
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}" if "@" in host else url


def parse_targets(raw: str) -> dict[str, int]:
    """`256` (every search) or `rebase=256,rstar=64` (the rest unbounded by name: 256); each
    name a registered search's (plug-ins loaded first)."""
    raw = raw.strip()
    if "=" not in raw:
        return dict.fromkeys(SEARCHES, int(raw))
    out: dict[str, int] = dict.fromkeys(SEARCHES, DEFAULT_MAX_TARGET)
    for item in raw.split(","):
        name, _, value = item.partition("=")
        if name.strip() not in SEARCHES:
            raise ValueError(name)
        out[name.strip()] = int(value)
    return out


def plugins_ok(modules: str, _: object) -> bool:
    """Load the search plug-ins (`spex.shared.runtime.searches`): the entry points, and the
    modules SPEX_SEARCH_PLUGINS names; one that fails raises its own one-line error."""
    load_searches(modules)
    return True


def urls(raw: str) -> list[str]:
    """A comma-separated list of URLs (`SPEX_ENGINE_URL`, `SPEX_PRM_URL`), blanks dropped."""
    return [u.strip() for u in raw.split(",") if u.strip()]


def http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def reward_ok(reward: str, s: Read) -> bool:
    """logprob rewards a model's own text; prm on real content needs a reward model to ask."""
    if reward == "logprob":
        return s.content == "real"
    if reward == "prm":
        return s.content != "real" or bool(s.prm or s.prm_url)
    return reward == ""


def targets_ok(raw: str) -> bool:
    try:
        return all(v >= 1 for v in parse_targets(raw).values())
    except ValueError:
        return False
