"""Each reward-model family in process, on random weights `spex model init --prm --prm-kind`
builds from its architecture's config: every step's reward, scored path by path as a search asks,
equals the one its published reference code reads off the whole path at once (Qwen2.5-Math-PRM's
card: P(positive) at each `<extra_0>`; Math-Shepherd's card: softmax over the `+`/`-` logits at
each `ки`; search-and-learn's RLHFlow scorer: the same where the assistant's `+` is predicted),
lies in (0, 1) and depends on the text; a batch scores as each path alone; a directory of another
family is refused naming it."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spex.cli.main import main
from spex.shared.content.prompt_style import DEFAULT_STYLE
from spex.shared.content.reward_prompts import RewardFormat
from spex.shared.engine.api import EngineRequest
from spex.shared.hf.models import load_prm
from spex.shared.hf.reward import RewardConfig, RewardEngine

QUESTION = "Natalia sold clips to 48 of her friends in April, and then half as many in May."
STEPS = ["In April she sold 48 clips.", "In May she sold 48 / 2 = 24 clips.", "The answer is \\boxed{72}."]
OTHER = ["In April she sold 40 clips.", "In May she sold 9 clips.", "The answer is \\boxed{7}."]
FAMILIES = {
    "step-tag": RewardFormat("step-tag"),
    "math-shepherd": RewardFormat("plus-minus"),
    "rlhflow": RewardFormat("plus-minus", chat=True),
    "token-classification": RewardFormat(),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One random-weight model of each family, as the command line builds it."""
    out = {}
    for kind in ("token-classification", "step-tag", "plus-minus"):
        path = tmp_path_factory.mktemp(kind)
        assert main(["model", "init", "--prm", "--prm-kind", kind, "--layers", "2", "--hidden", "64",
                     "--out", str(path)]) == 0  # fmt: skip
        out[kind] = path
    return out


def engine(models: dict[str, Path], family: str, deterministic: bool = True) -> RewardEngine:
    fmt = FAMILIES[family]
    return RewardEngine.from_dir(models[fmt.kind], RewardConfig(deterministic=deterministic), fmt)


def scored(e: RewardEngine, paths: list[list[str]]) -> list[float]:
    """Each path scored as the scorer asks: its text in the family's pieces, one request each."""
    for i, steps in enumerate(paths):
        pieces = e.format.pieces(QUESTION, steps, e.template, DEFAULT_STYLE)
        e.submit(EngineRequest(f"r{i}", (("q", 1),), f"n{i}", 0, text=tuple(pieces)), 0.0)
    done = []
    while e.ready_s() is not None:
        done += e.step()
    by_rid = {c.rid: c.reward for c in done}
    return [float(by_rid[f"r{i}"]) for i in range(len(paths))]


def reference(e: RewardEngine, family: str, steps: list[str]) -> list[float]:
    """Every step's reward from one forward pass over the whole path, as the family's
    published code reads it."""
    tok, fmt = e.tokenizer, e.format
    if family == "rlhflow":  # search-and-learn: a twin chat with `ки` replies marks the `+` positions

        def chat(reply: str) -> list[int]:
            turns = []
            for i, step in enumerate(steps):
                turns += [{"role": "user", "content": f"{QUESTION} {step}" if i == 0 else step},
                          {"role": "assistant", "content": reply}]  # fmt: skip
            return tok.encode(tok.apply_chat_template(turns, tokenize=False), add_special_tokens=False)

        ids, marks = chat("+"), chat("ки")
        assert len(ids) == len(marks)
        plus, minus = (
            tok.encode("+", add_special_tokens=False)[-1],
            tok.encode("-", add_special_tokens=False)[-1],
        )
        with torch.inference_mode():
            logits = e.model(torch.tensor([ids])).logits[0, :, [plus, minus]]
        scores = logits.softmax(-1)[:, 0]
        tag = tok.encode("ки", add_special_tokens=False)[-1]
        return [float(scores[p - 1]) for p, t in enumerate(marks) if t == tag]
    text = "".join(fmt.pieces(QUESTION, steps, e.template, DEFAULT_STYLE))
    ids = tok.encode(text, add_special_tokens=False)
    tag = tok.encode(fmt.tag, add_special_tokens=False)[-1]
    with torch.inference_mode():
        logits = e.model(torch.tensor([ids])).logits[0]
    if family == "step-tag":  # the card's make_step_rewards: P(positive) at each <extra_0>
        probs = logits.softmax(-1)[:, 1]
    else:  # Math-Shepherd's card: softmax over the + and - logits, P(+), at each ки
        plus, minus = (
            tok.encode("+", add_special_tokens=False)[-1],
            tok.encode("-", add_special_tokens=False)[-1],
        )
        probs = logits[:, [plus, minus]].softmax(-1)[:, 0]
    return [float(probs[p]) for p, t in enumerate(ids) if t == tag]


@pytest.mark.parametrize("family", ["step-tag", "math-shepherd", "rlhflow"])
def test_each_steps_reward_is_the_one_the_familys_reference_code_reads(models, family):
    e = engine(models, family)
    rewards = scored(e, [STEPS[:n] for n in range(1, len(STEPS) + 1)])
    expected = reference(e, family, STEPS)
    assert len(expected) == len(STEPS)  # a tag (or a reply) after every step, where the family reads
    assert rewards == pytest.approx(expected, abs=1e-5)
    assert all(0.0 < r < 1.0 for r in rewards) and len({round(r, 6) for r in rewards}) == len(STEPS)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_reward_depends_on_the_text_and_a_batch_scores_as_each_path_alone(models, family):
    paths = [STEPS[:2], OTHER[:2], STEPS, OTHER]
    alone = scored(engine(models, family), paths)
    together = scored(engine(models, family, deterministic=False), paths)
    assert together == pytest.approx(alone, abs=1e-5)
    assert alone[0] != pytest.approx(alone[1], abs=1e-6) and alone[2] != pytest.approx(alone[3], abs=1e-6)


def test_the_step_tag_is_one_token_after_each_step_and_the_path_ends_at_it(models):
    e = engine(models, "step-tag")
    ids = e.tokenizer.encode("".join(e.format.pieces(QUESTION, STEPS, e.template, DEFAULT_STYLE)),
                             add_special_tokens=False)  # fmt: skip
    tag = e.tokenizer.convert_tokens_to_ids("<extra_0>")
    assert ids[-1] == tag and ids.count(tag) == len(STEPS)
    assert type(e.model).__name__ == "Qwen2ForProcessRewardModel"


def test_a_model_of_another_family_is_refused_naming_its_family(models, tmp_path):
    with pytest.raises(
        ValueError, match=r"^prm_kind: the reward model in .* is a step-tag model, not plus-minus"
    ):
        load_prm(models["step-tag"], kind="plus-minus")
    with pytest.raises(ValueError, match="is a token-classification model, not step-tag"):
        load_prm(models["token-classification"], kind="step-tag")
    # `spex up` refuses it before anything starts, in one line naming the flag.
    up = [
        "up",
        "--prm",
        str(models["step-tag"]),
        "--prm-kind",
        "plus-minus",
        "--data-dir",
        str(tmp_path / "d"),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "spex.cli", *up], capture_output=True, text=True, timeout=120
    )
    [line] = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and line.startswith("spex: error: --prm-kind: the reward model in "), (
        proc.stderr
    )
    assert not (tmp_path / "d").exists()
