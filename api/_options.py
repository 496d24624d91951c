"""What an offline evaluation runs on: the generator (`Engine`), the step reward (`Reward`) and how
steps are written and read (`Prompt`). Each is a frozen value with a constructor per kind;
`spex.evaluate` turns them into the benchmark's configuration (`_evaluate.bench_config`), the
one place each field reaches the engines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict, Unpack

from spex.proto.messages import PROMPT_PRESETS
from spex.shared.content.prompts import DEFAULT_SPLIT, DEFAULT_TEMPERATURE, SPLITS, Split
from spex.shared.content.reward_prompts import DEFAULT_PRM_TOKENS

__all__ = ["Engine", "EngineKind", "Prompt", "Reward", "RewardKind", "ServerKind"]

EngineKind = Literal["sim", "hf", "vllm", "sglang"]
ServerKind = Literal["vllm", "sglang"]
RewardKind = Literal["prm", "logprob"]


@dataclass(frozen=True)
class Engine:
    """The generator: the simulated GPU, a model in process, or a vLLM or SGLang server.

    Build one with `Engine.sim()`, `Engine.hf(...)`, `Engine.vllm(...)` or `Engine.sglang(...)`.
    On `sim` the questions' trees are the synthetic workload's (the text is not read); every
    other engine writes the model's own steps for the questions' text.

    Attributes:
        kind: `"sim"`, `"hf"`, `"vllm"` or `"sglang"`.
        model: `hf`: the model's local directory (Hugging Face layout). A server: the served
            model's directory, for its tokenizer and chat template (without one, prompts are
            plain text and tokens are counted as characters).
        url: A server's base URL (`http://HOST:PORT`).
        profile: `sim`: the simulated GPU, `MODEL@GPU` (`spex bench --list-profiles`).
        device: `hf`: the torch device (`cpu`, `cuda`).
        dtype: `hf`: the weights' and KV's dtype (`float32`, `bfloat16`; `""`: as saved).
        deterministic: Batch-invariant outputs, so SPEX's trees are the baseline's on a real
            model (`hf`; `sglang` started with `--enable-deterministic-inference`).
        max_running: `hf`: sequences decoded together (also the speculative pool's size where
            no measured profile budgets it).
    """

    kind: EngineKind = "sim"
    model: str | None = None
    url: str | None = None
    profile: str = "Llemma-7B@A6000"
    device: str = "cpu"
    dtype: str = ""
    deterministic: bool = False
    max_running: int = 16

    @classmethod
    def sim(cls, profile: str = "Llemma-7B@A6000") -> Engine:
        """The simulated GPU of `profile` (`MODEL@GPU`), on the synthetic workload."""
        return cls("sim", profile=profile)

    @classmethod
    def hf(
        cls,
        model: str,
        *,
        device: str = "cpu",
        dtype: str = "",
        deterministic: bool = False,
        max_running: int = 16,
    ) -> Engine:
        """SPEX's in-process PyTorch engine on the model in the local directory `model`."""
        return cls("hf", model=model, device=device, dtype=dtype, deterministic=deterministic,
                   max_running=max_running)  # fmt: skip

    @classmethod
    def vllm(cls, url: str, *, model: str | None = None) -> Engine:
        """A vLLM server at `url` (its OpenAI-compatible API); `model`: the served model's
        directory, for its chat template and tokenizer."""
        return cls("vllm", model=model, url=url)

    @classmethod
    def sglang(cls, url: str, *, model: str | None = None, deterministic: bool = False) -> Engine:
        """An SGLang server at `url` (its native `/generate`); `model`: the served model's
        directory, for its chat template and tokenizer."""
        return cls("sglang", model=model, url=url, deterministic=deterministic)


class _Family(TypedDict, total=False):
    """What a reward model's family reads (`Reward`'s fields of the same names)."""

    step_tag: str
    tokens: tuple[str, str]
    chat: bool


@dataclass(frozen=True)
class Reward:
    """How a step is scored: a process reward model (simulated, in process, or served by vLLM
    or SGLang) or the generator's own log-probabilities.

    Build one with `Reward.simulated()`, `Reward.logprob()`, `Reward.prm(...)` or
    `Reward.served(...)`.

    Attributes:
        kind: `"prm"` (a process reward model) or `"logprob"` (the step's mean token
            log-probability, from the generation itself).
        model: A PRM's local directory: run in process, or with `url` its tokenizer and chat
            template. `None` with `kind="prm"` and no `url`: the simulated PRM (the `sim`
            engine only).
        url: A PRM server's base URL.
        server: What serves `url`: `"vllm"` (`/pooling`, started with `--runner pooling`) or
            `"sglang"` (`/classify`, started with `--is-embedding`).
        prm_kind: The PRM's family (`None`: `"token-classification"`, a two-label token
            classifier scored at the step's last token): `"step-tag"` (a
            `Qwen2ForProcessRewardModel`-style model pooled at a step tag, Qwen2.5-Math-PRM) or
            `"plus-minus"` (a causal LM's good/bad token logits at a step tag, Math-Shepherd and
            RLHFlow's PRMs). The guide "Your reward model" says which published PRM is which.
        step_tag: step-tag, plus-minus: the tag written after each step (`""`: the family's,
            `<extra_0>` or `ки`).
        tokens: plus-minus: the good and the bad token, e.g. `("+", "-")` or `("good", "bad")`.
        chat: plus-minus: RLHFlow's chat layout (each step a user turn, the verdict the
            assistant's).
    """

    kind: RewardKind = "prm"
    model: str | None = None
    url: str | None = None
    server: ServerKind = "vllm"
    prm_kind: str | None = None
    step_tag: str = ""
    tokens: tuple[str, str] = DEFAULT_PRM_TOKENS
    chat: bool = False

    @classmethod
    def simulated(cls) -> Reward:
        """The simulated PRM: a noisy signal of whether a synthetic step is on track (`sim`)."""
        return cls("prm")

    @classmethod
    def logprob(cls) -> Reward:
        """The generator's own mean token log-probability of the step (no reward model)."""
        return cls("logprob")

    @classmethod
    def prm(cls, model: str, *, prm_kind: str | None = None, **family: Unpack[_Family]) -> Reward:
        """The process reward model in the local directory `model`, run in process (`family`:
        `step_tag`, `tokens`, `chat` as the class says)."""
        return cls("prm", model=model, prm_kind=prm_kind, **family)

    @classmethod
    def served(
        cls,
        url: str,
        *,
        server: ServerKind = "vllm",
        model: str | None = None,
        prm_kind: str | None = None,
        **family: Unpack[_Family],
    ) -> Reward:
        """A process reward model served at `url` by `server` (`"vllm"` or `"sglang"`); `model`:
        its local directory, for its tokenizer and chat template."""
        return cls("prm", model=model, url=url, server=server, prm_kind=prm_kind, **family)

    @property
    def is_simulated(self) -> bool:
        return self.kind == "prm" and self.model is None and self.url is None


@dataclass(frozen=True)
class Prompt:
    """How a real model's steps are written and read (the `sim` engine writes none).

    The defaults are SPEX's own prompt; the guide "Prompts" states them in full.

    Attributes:
        preset: A named prompt: `"spex"` (SPEX's instruction and worked example) or
            `"search-and-learn"` (search-and-learn's system prompt and blank-line steps).
        system_prompt: A system prompt in place of the preset's instruction (`""`: the preset's).
        chat_template: A chat template (Jinja text, or the path of a file holding it) in place of
            the model's own (`""`: the model's).
        step_delimiter: What ends a step and joins the path's steps, e.g. a blank line (`""`: the
            preset's, or `step_split`'s).
        step_split: Where a step ends, for the prompt's worked example, the delimiter between
            the path's steps and the generation's stop strings: `"newline"` (a step is a line),
            `"blank-line"` (a paragraph) or `"numbered"` (a numbered line and what follows it).
        min_step_tokens: A stop string met before a step has this many tokens does not end it.
        temperature: The generator's sampling temperature (0: greedy).
    """

    preset: str = "spex"
    system_prompt: str = ""
    chat_template: str = ""
    step_delimiter: str = ""
    step_split: Split = DEFAULT_SPLIT
    min_step_tokens: int = 0
    temperature: float = DEFAULT_TEMPERATURE

    def __post_init__(self) -> None:
        if self.preset not in PROMPT_PRESETS:
            raise ValueError(f"preset: one of {', '.join(PROMPT_PRESETS)}, not {self.preset!r}")
        if self.step_split not in SPLITS:
            raise ValueError(f"step_split: one of {', '.join(SPLITS)}, not {self.step_split!r}")
