"""Each reward-model family is given the path as its published model card writes it, cut where the
last step's score is read (a causal model's score there does not depend on what follows):
Qwen2.5-Math-PRM's conversation with `<extra_0>` after each step, Math-Shepherd's question and
`ки`-tagged steps, RLHFlow's chat with `+` answering each step, SPEX's own the generator's prompt."""

import pytest

from spex.shared.content.prompt_style import DEFAULT_STYLE, PromptStyle
from spex.shared.content.prompts import Template, prompt_pieces
from spex.shared.content.reward_prompts import STEP_TAG_SYSTEM_PROMPT, RewardFormat
from spex.shared.hf.models import train_tokenizer

QUESTION = "What is 2 + 3?"
STEPS = ["Two plus three.", "That is 5.", "The answer is \\boxed{5}."]


@pytest.fixture(scope="module")
def template() -> Template:
    return Template(train_tokenizer(300))


def test_step_tag_is_the_cards_conversation_cut_after_the_last_tag(template):
    text = "".join(RewardFormat("step-tag").pieces(QUESTION, STEPS, template, DEFAULT_STYLE))
    card = template.tokenizer.apply_chat_template(
        [
            {"role": "system", "content": STEP_TAG_SYSTEM_PROMPT},
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "<extra_0>".join(STEPS) + "<extra_0>"},
        ],
        tokenize=False,
        add_generation_prompt=False,
    )
    assert text == card[: card.rindex("<extra_0>") + len("<extra_0>")]
    assert text.count("<extra_0>") == len(STEPS)


def test_math_shepherd_is_the_question_and_the_tagged_steps_a_line_each(template):
    text = "".join(RewardFormat("plus-minus").pieces(QUESTION, STEPS, template, DEFAULT_STYLE))
    assert text == f"{QUESTION} {STEPS[0]} ки\n{STEPS[1]} ки\n{STEPS[2]} ки"


def test_rlhflow_is_a_chat_cut_where_the_last_steps_plus_is_predicted(template):
    fmt = RewardFormat("plus-minus", chat=True)
    text = "".join(fmt.pieces(QUESTION, STEPS, template, DEFAULT_STYLE))
    conversation = []
    for i, step in enumerate(STEPS):
        conversation += [
            {"role": "user", "content": f"{QUESTION} {step}" if i == 0 else step},
            {"role": "assistant", "content": "+"},
        ]
    whole = template.tokenizer.apply_chat_template(conversation, tokenize=False)
    assert whole.startswith(text) and whole[len(text) :].startswith("+")
    assert text.count("+\n") == len(STEPS) - 1  # the earlier steps answered by the good token
    with pytest.raises(ValueError, match="^prm_chat: the reward model's tokenizer has no chat template"):
        fmt.pieces(QUESTION, STEPS, Template(), DEFAULT_STYLE)


def test_token_classification_reads_the_generators_prompt_in_its_own_template(template):
    style = PromptStyle(system_prompt="Be terse.", chat_template="{{ nonsense }}", step_delimiter="\n\n")
    pieces = RewardFormat().pieces(QUESTION, STEPS, template, style)
    assert pieces == prompt_pieces(
        QUESTION, STEPS, template, PromptStyle(system_prompt="Be terse.", step_delimiter="\n\n")
    )
    assert pieces[0].startswith("<|system|>\nBe terse.")  # the reward model's own chat template


@pytest.mark.parametrize("fmt", [RewardFormat(), RewardFormat("step-tag"), RewardFormat("plus-minus")])
def test_a_childs_text_is_its_parents_plus_a_piece(template, fmt):
    parent = fmt.pieces(QUESTION, STEPS[:2], template, DEFAULT_STYLE)
    child = fmt.pieces(QUESTION, STEPS, template, DEFAULT_STYLE)
    assert child[: len(parent)] == parent and len(child) == len(parent) + 1


def test_a_family_is_checked_where_it_is_named():
    with pytest.raises(ValueError, match="^prm_kind: one of token-classification, step-tag, plus-minus"):
        RewardFormat("outcome")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^prm_chat: "):
        RewardFormat("step-tag", chat=True)
    with pytest.raises(ValueError, match="^prm_tokens: "):
        RewardFormat("plus-minus", tokens=("+", "+"))
    assert RewardFormat.parse_tokens(" good , bad ") == ("good", "bad")
    assert (
        RewardFormat().positive,
        RewardFormat("step-tag").positive,
        RewardFormat("plus-minus").positive,
    ) == (1, 1, 0)


class AddsStart:
    """A tokenizer that puts its start token before what it encodes (Mistral's, Llama's)."""

    bos_token, bos_token_id, chat_template = "<s>", 1, None

    def encode(self, text, add_special_tokens=True):
        return [1, 7] if add_special_tokens else [7]


def test_math_shepherd_starts_with_the_start_token_its_tokenizer_would_add():
    text = "".join(
        RewardFormat("plus-minus").pieces(QUESTION, STEPS[:1], Template(AddsStart()), DEFAULT_STYLE)
    )
    assert text == f"<s>{QUESTION} {STEPS[0]} ки"
