"""A prompt teaches the answer format by a worked example — never by a placeholder a model
would copy — with the example as an earlier exchange where the tokenizer has a chat
template; a template without a system turn gets the instruction in the first user turn."""

from spex.shared.content.prompts import (
    EXAMPLE_QUESTION,
    EXAMPLE_SOLUTION,
    EXAMPLE_STEPS,
    INSTRUCTION,
    STEP_DELIMITER,
    chat_template,
    plain_template,
    prompt_pieces,
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


def test_no_placeholder_reaches_the_model_and_the_example_reads_as_the_search_reads_steps():
    for head in (plain_template("What is 2 + 3?"), chat_template(ChatTokenizer())("What is 2 + 3?")):
        assert "\\boxed{answer}" not in head and "\\boxed{}" not in head
        assert EXAMPLE_SOLUTION in head and head.rstrip().endswith(("2 + 3?", "assistant:"))
    assert STEP_DELIMITER.join(EXAMPLE_STEPS) == EXAMPLE_SOLUTION
    assert [extract_answer(step) for step in EXAMPLE_STEPS] == [None, None, "8"]


def test_with_a_chat_template_the_example_is_an_earlier_exchange():
    tokenizer = ChatTokenizer()
    chat_template(tokenizer)("What is 2 + 3?")
    assert [(t["role"], t["content"]) for t in tokenizer.turns] == [
        ("system", INSTRUCTION),
        ("user", EXAMPLE_QUESTION),
        ("assistant", EXAMPLE_SOLUTION),
        ("user", "What is 2 + 3?"),
    ]
    refuses_system = ChatTokenizer(system=False)
    chat_template(refuses_system)("What is 2 + 3?")
    assert [t["role"] for t in refuses_system.turns] == ["user", "assistant", "user"]
    assert refuses_system.turns[0]["content"].startswith(INSTRUCTION)


def test_a_child_prompt_is_its_parent_s_plus_one_piece():
    parent = prompt_pieces("What is 2 + 3?", ["Two plus three."])
    child = prompt_pieces("What is 2 + 3?", ["Two plus three.", "That is 5."])
    assert child[: len(parent)] == parent and child[-1] == "That is 5." + STEP_DELIMITER
