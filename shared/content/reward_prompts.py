"""How a process reward model reads a path: its family, the text it is given, and where in that
text its score for the last step is read. The text ends where the score is read, so every family
reads at the text's last token, in process and on a server alike.

The families (`PRM_KINDS`) and the published facts each rests on:
- `token-classification` (SPEX's own, `spex model init --prm`): a two-label head over every
  token (wrong, right); the path is written as the generator's prompt (the same pieces: the
  head through the reward model's chat template, then each step and its delimiter) and the score
  is P(right) at its last token.
- `step-tag` (`Qwen2ForProcessRewardModel`: Qwen/Qwen2.5-Math-PRM-7B and -72B, whose model card
  says: steps separated, the special token `<extra_0>` inserted after each step, the reward the
  probability of the positive class (softmax over two labels, index 1) at that token; the
  conversation is a system turn "Please reason step by step, and put your final answer within
  \\boxed{}.", the question as the user turn and the steps, each followed by the tag, as the
  assistant turn). The text is that conversation cut after the last tag: a causal model's score
  at the tag does not depend on what follows it.
- `plus-minus` (a causal LM scored by two of its vocabulary's tokens at a step tag; the reward is
  softmax over the logits of the good and bad tokens, the good one's probability):
  - Math-Shepherd (peiyi9979/math-shepherd-mistral-7b-prm, its model card): the question, a
    space, then the steps joined by newlines, each ending in " ки" (the step tag); good `+`, bad
    `-`, read at each `ки`. The text ends at the last tag.
  - RLHFlow's PRMs (RLHFlow/Llama3.1-8B-PRM-Deepseek-Data; search-and-learn's `RLHFFlow` in
    src/sal/models/reward_models.py): a chat in the model's template, each step a user turn (the
    first one "question step"), each answered by the assistant with the good token `+`; a step's
    score is read where the assistant's reply token is predicted (`chat`): the text is the
    conversation up to the last step's assistant header (the generation prompt).
  Token texts become ids as those codes take them: the last id of the text's encoding (or give
  the ids themselves, `648,387`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from spex.shared.content.prompt_style import PromptStyle
from spex.shared.content.prompts import Template, prompt_pieces

__all__ = [
    "DEFAULT_PRM_TOKENS",
    "PRM_KINDS",
    "STEP_TAG_SYSTEM_PROMPT",
    "PrmKind",
    "RewardFormat",
    "family_of",
]

PrmKind = Literal["token-classification", "step-tag", "plus-minus"]
PRM_KINDS: tuple[PrmKind, ...] = get_args(PrmKind)
# Each family's step tag as its published models write it (Qwen2.5-Math-PRM; Math-Shepherd).
DEFAULT_STEP_TAGS: dict[PrmKind, str] = {
    "token-classification": "",
    "step-tag": "<extra_0>",
    "plus-minus": "ки",
}
DEFAULT_PRM_TOKENS = ("+", "-")  # plus-minus: the good and the bad token
# The system turn of Qwen2.5-Math-PRM's model card.
STEP_TAG_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."


def family_of(architecture: str) -> PrmKind | None:
    """The family a model's architecture (its config's first `architectures`) belongs to (None:
    one no family names)."""
    if architecture == "Qwen2ForProcessRewardModel":
        return "step-tag"
    if architecture.endswith("ForCausalLM"):
        return "plus-minus"
    if architecture.endswith("ForTokenClassification"):
        return "token-classification"
    return None


@dataclass(frozen=True)
class RewardFormat:
    """A reward model's family and the texts it needs. `step_tag` "": the family's own
    (`<extra_0>`, `ки`); `tokens`: plus-minus's good and bad token (texts, or ids as digits);
    `chat`: plus-minus in a chat (RLHFlow's) rather than after a step tag (Math-Shepherd's)."""

    kind: PrmKind = "token-classification"
    step_tag: str = ""
    tokens: tuple[str, str] = DEFAULT_PRM_TOKENS
    chat: bool = False

    def __post_init__(self) -> None:
        if self.kind not in PRM_KINDS:
            raise ValueError(f"prm_kind: one of {', '.join(PRM_KINDS)}, not {self.kind!r}")
        if self.chat and self.kind != "plus-minus":
            raise ValueError("prm_chat: the chat layout is the plus-minus family's (RLHFlow's PRMs)")
        good, bad = self.tokens
        if not good.strip() or not bad.strip() or good == bad:
            raise ValueError(f"prm_tokens: two different tokens, good then bad (e.g. +,-), not {good},{bad}")

    @classmethod
    def parse_tokens(cls, text: str) -> tuple[str, str]:
        """`+,-` (or `648,387`) as (good, bad)."""
        good, sep, bad = text.partition(",")
        if not sep or not good.strip() or not bad.strip():
            raise ValueError(f"prm_tokens: GOOD,BAD (e.g. +,- or good,bad), not {text!r}")
        return good.strip(), bad.strip()

    @property
    def tag(self) -> str:
        """The step tag the text writes after each step ("" where the family reads none)."""
        if self.kind == "token-classification" or self.chat:
            return ""
        return self.step_tag or DEFAULT_STEP_TAGS[self.kind]

    @property
    def positive(self) -> int:
        """Which of a score's two numbers is the step's being right: a classifier's labels are
        (wrong, right); plus-minus's tokens are (good, bad), as vLLM's `returned_token_ids`."""
        return 0 if self.kind == "plus-minus" else 1

    def pieces(
        self, question: str, steps: Sequence[str], template: Template, style: PromptStyle
    ) -> list[str]:
        """The text a path is scored by, in pieces (a path's text is its parent's plus a piece,
        except in the chat layout, whose text is one piece)."""
        if self.kind == "token-classification":
            return prompt_pieces(question, steps, template, style.without_template())
        if self.kind == "step-tag":
            turns = [
                {"role": "system", "content": STEP_TAG_SYSTEM_PROMPT},
                {"role": "user", "content": question},
            ]
            head = template.chat(turns)
            if head is None:  # no chat template: the same turns as plain text
                head = f"{STEP_TAG_SYSTEM_PROMPT}\n\n{question}\n\n"
            return [head, *(step + self.tag for step in steps)]
        if self.chat:
            return [self._conversation(question, steps, template)]
        # As Math-Shepherd's card encodes it: the tokenizer's own start token (it encodes with
        # its special tokens), the question, then the tagged steps a line each.
        tagged = [f"{step} {self.tag}" for step in steps]
        return [f"{template.start_text()}{question} ", *tagged[:1], *(f"\n{t}" for t in tagged[1:])]

    def _conversation(self, question: str, steps: Sequence[str], template: Template) -> str:
        turns: list[dict[str, str]] = []
        for i, step in enumerate(steps):
            if i:
                turns.append({"role": "assistant", "content": self.tokens[0]})
            turns.append({"role": "user", "content": f"{question} {step}" if i == 0 else step})
        text = template.chat(turns)
        if text is None:
            raise ValueError("prm_chat: the reward model's tokenizer has no chat template")
        return text

    def probe(self) -> str:
        """A short text a served model scores at start: one step, tagged as this family writes it."""
        if self.kind == "step-tag":
            return "1" + self.tag
        if self.kind == "plus-minus" and not self.chat:
            return "1 " + self.tag
        return "1"
