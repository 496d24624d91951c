"""The synthetic reasoning workload: what the simulated LLM writes and what the
simulated reward models say, deterministic from (world seed, query, node identity).

- A query has a difficulty in [0, 1], Kumaraswamy(α, β) distributed (Beta-like, with a
  closed-form inverse CDF).
- A node is *on track* or *derailed*: a derailed parent has only derailed children; an
  on-track parent derails a child with probability `derail_base + derail_scale · difficulty`.
- A node's length in tokens: uniform in [dfs_step_tokens_min, dfs_step_tokens_max] for
  depth-first searches; log-normal with a long tail, cut at `step_token_cap`, for
  breadth-first searches (the stragglers behind BFS's shrinking batch). A node cut at the cap
  finishes with reason "length" and is not terminal.
- A node is terminal with probability `terminal_base + terminal_per_depth · depth` (most
  answers are shallow). An on-track terminal answers correctly; a derailed one answers from
  a small set of wrong answers, skewed so that wrong answers collide and can win a vote.
- Early answers are rushed: an on-track terminal at depth d gives the query's *trap* answer
  (a plausible wrong one that rushed steps agree on) with probability
  `rushed_answer_p · max(0, 1 − (d − 1) / rushed_answer_depth)`; the reward models cannot
  tell (its rewards are an on-track step's), so the trap can lead the vote early. Without it
  (`rushed_answer_p = 0`) shallow answers are the most reliable ones and stopping on them
  early raises accuracy, where the paper reports T3 costing 3–6.7 points.
- The PRM reward is `sigmoid(prm_gain · s + prm_noise · z)` with s = +1 on track, −1
  derailed, z standard normal; the logprob reward (exp of the mean token log-probability) is
  the same with the weaker `logprob_gain`, `logprob_noise`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from spex.proto.messages import SIM_STYLES, FinishReason, SimStyle
from spex.shared.core.ids import derived_int, derived_uniform

__all__ = ["Generation", "KNOB_DOCS", "SyntheticQuestion", "SyntheticWorkload", "WorkloadKnobs"]


@dataclass(frozen=True)
class WorkloadKnobs:
    difficulty_alpha: float = 2.0
    difficulty_beta: float = 3.0
    derail_base: float = 0.05
    derail_scale: float = 0.80
    question_tokens_min: int = 80
    question_tokens_max: int = 300
    dfs_step_tokens_min: int = 50
    dfs_step_tokens_max: int = 100
    bfs_step_tokens_median: float = 70.0
    bfs_step_tokens_sigma: float = 0.7
    step_token_cap: int = 256
    terminal_base: float = 0.02
    terminal_per_depth: float = 0.08
    wrong_answers: int = 3
    wrong_answer_decay: float = 0.5
    prm_gain: float = 0.5
    prm_noise: float = 1.0
    logprob_gain: float = 0.25
    logprob_noise: float = 0.8
    ideas_per_step: int = 4
    rushed_answer_p: float = 0.5
    rushed_answer_depth: float = 4.0


KNOB_DOCS: dict[str, str] = {
    "difficulty_alpha": "Kumaraswamy(α, β) of query difficulty: α",
    "difficulty_beta": "Kumaraswamy(α, β) of query difficulty: β",
    "derail_base": "P(derail) of a child of an on-track node at difficulty 0",
    "derail_scale": "added P(derail) per unit of difficulty",
    "question_tokens_min": "question length, tokens (uniform): low end",
    "question_tokens_max": "question length, tokens (uniform): high end",
    "dfs_step_tokens_min": "DFS step length, tokens (uniform): low end",
    "dfs_step_tokens_max": "DFS step length, tokens (uniform): high end",
    "bfs_step_tokens_median": "BFS step length, tokens (log-normal): median",
    "bfs_step_tokens_sigma": "BFS step length (log-normal): sigma of log tokens",
    "step_token_cap": "max_new_tokens of one step; longer steps stop with reason 'length'",
    "terminal_base": "P(terminal) at depth 0",
    "terminal_per_depth": "added P(terminal) per level of depth",
    "wrong_answers": "size of a query's set of wrong answers",
    "wrong_answer_decay": "wrong answer k is drawn with weight decay^k (collisions)",
    "prm_gain": "PRM signal: logit separation of on-track vs derailed",
    "prm_noise": "PRM noise: std of the logit noise",
    "logprob_gain": "logprob signal: logit separation (weaker than the PRM)",
    "logprob_noise": "logprob noise: std of the logit noise",
    "ideas_per_step": "distinct step texts a node's children draw from (semantic clusters)",
    "rushed_answer_p": "P(an on-track answer at depth 1 is wrong); falls linearly with depth",
    "rushed_answer_depth": "depths over which rushed answers fade out (0 at depth 1 + this)",
}


def load_knobs(path: str | Path | None = None, overrides: list[str] | None = None) -> WorkloadKnobs:
    """Knobs from a TOML file (top-level keys or a [workload] table), then KEY=VALUE overrides.

    Raises ValueError with a one-line message naming the offending knob."""
    values: dict[str, object] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"workload file {path}: {exc}") from None
        values.update(data.get("workload", data))
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        values[key.strip()] = raw.strip()
    knobs = WorkloadKnobs()
    types = {f.name: type(getattr(knobs, f.name)) for f in fields(WorkloadKnobs)}
    parsed: dict[str, object] = {}
    for key, value in values.items():
        if key not in types:
            raise ValueError(f"unknown workload knob {key!r} (see spex bench --list-knobs)")
        try:
            parsed[key] = types[key](value)  # type: ignore[call-arg]
        except (TypeError, ValueError):
            raise ValueError(f"workload knob {key!r}: {value!r} is not a {types[key].__name__}") from None
    knobs = replace(knobs, **parsed)  # type: ignore[arg-type]
    _validate(knobs)
    return knobs


def _validate(k: WorkloadKnobs) -> None:
    checks = {
        "difficulty_alpha": k.difficulty_alpha > 0,
        "difficulty_beta": k.difficulty_beta > 0,
        "question_tokens_min": 1 <= k.question_tokens_min <= k.question_tokens_max,
        "dfs_step_tokens_min": 1 <= k.dfs_step_tokens_min <= k.dfs_step_tokens_max,
        "bfs_step_tokens_median": k.bfs_step_tokens_median >= 1,
        "bfs_step_tokens_sigma": k.bfs_step_tokens_sigma >= 0,
        "step_token_cap": k.step_token_cap >= 1,
        "wrong_answers": k.wrong_answers >= 1,
        "ideas_per_step": k.ideas_per_step >= 1,
        "prm_noise": k.prm_noise >= 0,
        "logprob_noise": k.logprob_noise >= 0,
        "rushed_answer_p": 0 <= k.rushed_answer_p <= 1,
        "rushed_answer_depth": k.rushed_answer_depth > 0,
    }
    for name, ok in checks.items():
        if not ok:
            raise ValueError(f"workload knob {name!r}: invalid value {getattr(k, name)!r}")


def knob_table() -> list[tuple[str, object, str]]:
    return [(name, value, KNOB_DOCS[name]) for name, value in asdict(WorkloadKnobs()).items()]


@dataclass(frozen=True)
class SyntheticQuestion:
    query_id: str
    text: str
    prompt_tokens: int
    reference_answer: str
    difficulty: float


@dataclass(frozen=True)
class Generation:
    """What the (simulated) LLM wrote for one node."""

    text: str
    tokens: int
    answer: str | None  # extracted final answer, None if the step does not answer
    finish_reason: FinishReason  # "stop" | "length"
    mean_logprob: float
    on_track: bool  # hidden ground truth; the search never reads it


def _normal(*key: object) -> float:
    u1 = max(derived_uniform("n1", *key), 1e-12)
    u2 = derived_uniform("n2", *key)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class SyntheticWorkload:
    """Pure functions of (seed, query, node path); `style` is "dfs" or "bfs"."""

    def __init__(self, knobs: WorkloadKnobs, seed: int, style: SimStyle = "bfs") -> None:
        if style not in SIM_STYLES:
            raise ValueError(f"style must be 'dfs' or 'bfs', not {style!r}")
        self.knobs, self.seed, self.style = knobs, seed, style
        self._on_track: dict[tuple[str, str], bool] = {}

    def query(self, index: int) -> SyntheticQuestion:
        return self.question(f"q{index:05d}")

    def question(self, qid: str) -> SyntheticQuestion:
        """The synthetic question with id `qid` (any string)."""
        k = self.knobs
        span = k.question_tokens_max - k.question_tokens_min + 1
        tokens = k.question_tokens_min + derived_int(span, self.seed, qid, "qtokens")
        return SyntheticQuestion(
            query_id=qid,
            text=f"Synthetic problem {qid} (world seed {self.seed})",
            prompt_tokens=tokens,
            reference_answer=self._correct(qid),
            difficulty=self._kumaraswamy(k.difficulty_alpha, k.difficulty_beta, self.seed, qid, "difficulty"),
        )

    def generate(self, query: SyntheticQuestion, path: list[str]) -> Generation:
        """The step written at the end of `path` (node ids from the root's first child)."""
        k, qid = self.knobs, query.query_id
        node, depth = path[-1], len(path)
        on_track = self.on_track(query, path)
        tokens = self._length(qid, node)
        finish: FinishReason = "stop"
        if tokens >= k.step_token_cap:
            tokens, finish = k.step_token_cap, "length"
        p_terminal = min(1.0, k.terminal_base + k.terminal_per_depth * depth)
        terminal = finish == "stop" and derived_uniform(self.seed, qid, node, "terminal") < p_terminal
        parent = path[-2] if len(path) > 1 else "root"
        idea = derived_int(k.ideas_per_step, self.seed, qid, parent, node, "idea")
        text = f"Step {depth}: {'apply' if on_track else 'assume'} approach {idea} of {parent[:6]}."
        answer = None
        if terminal:
            rushed = k.rushed_answer_p * max(0.0, 1.0 - (depth - 1) / k.rushed_answer_depth)
            if on_track and derived_uniform(self.seed, qid, node, "rushed") < rushed:
                answer = self._trap(qid)
            else:
                answer = self._correct(qid) if on_track else self._wrong(qid, node)
            text += f" The answer is {answer}"
        z = _normal(self.seed, qid, node, "logprob")
        conf = _sigmoid(k.logprob_gain * (1 if on_track else -1) + k.logprob_noise * z)
        return Generation(text, tokens, answer, finish, math.log(conf), on_track)

    def prm_reward(self, query: SyntheticQuestion, path: list[str]) -> float:
        k = self.knobs
        s = 1.0 if self.on_track(query, path) else -1.0
        z = _normal(self.seed, query.query_id, path[-1], "prm")
        return _sigmoid(k.prm_gain * s + k.prm_noise * z)

    def on_track(self, query: SyntheticQuestion, path: list[str]) -> bool:
        k, qid = self.knobs, query.query_id
        p_derail = min(1.0, k.derail_base + k.derail_scale * query.difficulty)
        ok = True
        for node in path:
            key = (qid, node)
            cached = self._on_track.get(key)
            if cached is None:
                cached = ok and derived_uniform(self.seed, qid, node, "derail") >= p_derail
                self._on_track[key] = cached
            ok = cached
        return ok

    def _length(self, qid: str, node: str) -> int:
        k = self.knobs
        if self.style == "dfs":
            span = k.dfs_step_tokens_max - k.dfs_step_tokens_min + 1
            return k.dfs_step_tokens_min + derived_int(span, self.seed, qid, node, "len")
        z = _normal(self.seed, qid, node, "len")
        return max(1, round(k.bfs_step_tokens_median * math.exp(k.bfs_step_tokens_sigma * z)))

    def _correct(self, qid: str) -> str:
        return f"{derived_int(1000, self.seed, qid, 'answer')}"

    def _trap(self, qid: str) -> str:
        """The plausible wrong answer rushed steps agree on (the first of the wrong set)."""
        correct = int(self._correct(qid))
        return str((correct + 1 + derived_int(5, self.seed, qid, 0, "w")) % 1000)

    def _wrong(self, qid: str, node: str) -> str:
        k = self.knobs
        weights = [k.wrong_answer_decay**i for i in range(k.wrong_answers)]
        u = derived_uniform(self.seed, qid, node, "wrong") * sum(weights)
        pick = 0
        while pick < len(weights) - 1 and u >= weights[pick]:
            u -= weights[pick]
            pick += 1
        correct = int(self._correct(qid))
        return str((correct + 1 + pick * 7 + derived_int(5, self.seed, qid, pick, "w")) % 1000)

    @staticmethod
    def _kumaraswamy(a: float, b: float, *key: object) -> float:
        u = derived_uniform(*key)
        return (1.0 - (1.0 - u) ** (1.0 / b)) ** (1.0 / a)
