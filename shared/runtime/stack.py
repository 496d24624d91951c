"""What a SPEX deployment runs on, in one line for people: the engine, the content and what
rewards a step. `spex up` prints it at start; whatever else tells a user how an answer was
made (an answer's `served_by`, `views.served_json`) labels synthetic content in the same words."""

from __future__ import annotations

from spex.shared.runtime.settings import Settings
from spex.shared.runtime.settings_values import urls, without_password
from spex.shared.runtime.views import demonstration, served_by

__all__ = ["SWEEP_CACHE", "describe_stack", "describe_step_curve"]

SERVER_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
SWEEP_CACHE = "~/.cache/spex/profiles"  # the in-process engine's start-up curves, per model and machine


def describe_stack(settings: Settings) -> str:
    """`engine: …, content …, reward: …` for `settings` (URLs without credentials)."""
    return f"engine: {_engine(settings)}, content {_content(settings)}, reward: {_reward(settings)}"


def _engine(s: Settings) -> str:
    if s.engine == "sim":
        return "simulated GPU"
    model = f" (model {s.model})" if s.model else ""
    if s.engine == "hf":
        return f"hf in process{model}"
    return f"{s.engine} at {', '.join(without_password(u) for u in urls(s.engine_url))}{model}"


def _content(s: Settings) -> str:
    return "real" if s.content == "real" else f"synthetic ({demonstration(served_by(s))})"


def _reward(s: Settings) -> str:
    model = _reward_model(s)
    if s.content != "real":  # the workload's reward; a reward model only times the passes
        return "simulated PRM" + (f" (its passes timed on the reward model {model})" if model else "")
    if s.step_reward == "logprob":
        return "the model's own log-probabilities"
    return f"prm {model}"


def _reward_model(s: Settings) -> str:
    """Where the reward model runs ("" without one)."""
    if s.prm_url:
        return f"via {SERVER_NAMES[s.prm_engine]} at {without_password(s.prm_url)}"
    return f"in process (model {s.prm})" if s.prm else ""


def describe_step_curve(settings: Settings) -> str:
    """Which step curve speculation is budgeted by, in one phrase."""
    if settings.engine == "sim":
        return f"the catalog's simulated {settings.profile}"
    if settings.profile_file:
        return f"the measured curve in {settings.profile_file}"
    if settings.engine == "hf" and settings.startup_sweep:
        return f"measured by the generator at its start (cached in {SWEEP_CACHE})"
    return (
        f"the catalog's {settings.profile}, a guess for this engine (measure one: `spex profile "
        "--engine vllm|sglang --json F`, then --profile-file F)"
    )
