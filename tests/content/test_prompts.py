"""A prompt teaches the answer format by a worked example — never by a placeholder a model
would copy — with the example as an earlier exchange where the tokenizer has a chat
template; a template without a system turn gets the instruction in the first user turn.
Each split (where a step ends) has its own example, delimiter and stop strings, and they
agree: the example, cut at the split's stop strings, is the example's steps."""

import pytest

from spex.shared.content.prompts import (
    EXAMPLE_QUESTION,
    EXAMPLE_STEPS,
    SPLITS,
    chat_template,
    delimiter,
    example_solution,
    instruction,
    plain_template,
    prompt_pieces,
    stop_strings,
)
from spex.shared.core.search.answers import extract_answer


class ChatTokenizer:
    """Records the turns it is given; renders them as `role: content` lines."""

    chat_template = "{{ messages }}"

    def __init__(self, system: bool = True) -> None:
        self.system = system
        self.turns: list[dict[str, str]] = []

    def apply_chat_template(self, turns, add_generation_prompt, tokenize):
        if not self.system and any(t["role"] == "system" for t in turns):
            raise ValueError("System role not supported")
        self.turns = turns
        return "".join(f"{t['role']}: {t['content']}\n" for t in turns) + "assistant: "


def cut(text: str, stops: tuple[str, ...]) -> list[str]:
    """`text` split where a generation with these stop strings would stop, step after step
    (a numbered split's stop string starts the next step: its number is that step's)."""
    steps = []
    while True:
        hits = [(i, s) for s in stops if (i := text.find(s, 1)) >= 0]
        if not hits:
            return [*steps, text]
        i, stop = min(hits)
        steps.append(text[:i])
        text = text[i + len(delimiter_of(stops)) :]


def delimiter_of(stops: tuple[str, ...]) -> str:
    return "\n\n" if stops == ("\n\n",) else "\n"


@pytest.mark.parametrize("split", SPLITS)
def test_no_placeholder_reaches_the_model_and_the_example_reads_as_the_search_reads_steps(split):
    question = "What is 2 + 3?"
    for head in (plain_template(question, split), chat_template(ChatTokenizer())(question, split)):
        assert "\\boxed{answer}" not in head and "\\boxed{}" not in head
        assert example_solution(split) in head and head.rstrip().endswith(("2 + 3?", "assistant:"))
    steps = cut(example_solution(split), stop_strings(split))
    assert len(steps) == len(EXAMPLE_STEPS) and all(s.endswith(e) for s, e in zip(steps, EXAMPLE_STEPS))
    assert [extract_answer(step) for step in steps] == [None, None, "8"]
    assert delimiter_of(stop_strings(split)) == delimiter(split)


def test_the_splits_differ_where_they_should():
    assert stop_strings("blank-line") == ("\n\n",) and stop_strings("newline") == ("\n",)
    numbered = stop_strings("numbered")
    assert "\n2." in numbered and "\n10." in numbered and "\n1." not in numbered
    assert example_solution("numbered").startswith("1. ") and "\n2. " in example_solution("numbered")
    assert "blank line" in instruction("blank-line") and "line" in instruction("newline")
    assert len({instruction(s) for s in SPLITS}) == len(SPLITS)


def test_with_a_chat_template_the_example_is_an_earlier_exchange():
    tokenizer = ChatTokenizer()
    chat_template(tokenizer)("What is 2 + 3?")
    assert [(t["role"], t["content"]) for t in tokenizer.turns] == [
        ("system", instruction()),
        ("user", EXAMPLE_QUESTION),
        ("assistant", example_solution()),
        ("user", "What is 2 + 3?"),
    ]
    refuses_system = ChatTokenizer(system=False)
    chat_template(refuses_system)("What is 2 + 3?", "numbered")
    assert [t["role"] for t in refuses_system.turns] == ["user", "assistant", "user"]
    assert refuses_system.turns[0]["content"].startswith(instruction("numbered"))


@pytest.mark.parametrize("split", SPLITS)
def test_a_child_prompt_is_its_parent_s_plus_one_piece(split):
    parent = prompt_pieces("What is 2 + 3?", ["Two plus three."], style=split)
    child = prompt_pieces("What is 2 + 3?", ["Two plus three.", "That is 5."], style=split)
    assert child[: len(parent)] == parent and child[-1] == "That is 5." + delimiter(split)


def test_the_services_and_the_bench_split_and_sample_the_same_way_by_default():
    from spex.bench.vtime import BenchConfig
    from spex.shared.content.prompts import DEFAULT_SPLIT, DEFAULT_TEMPERATURE
    from spex.shared.runtime.settings import Settings

    assert Settings().step_split == BenchConfig().step_split == DEFAULT_SPLIT
    assert Settings().sampling_temperature == BenchConfig().sampling_temperature == DEFAULT_TEMPERATURE
