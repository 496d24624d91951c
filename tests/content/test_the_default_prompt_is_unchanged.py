"""With no prompt setting, a question is written exactly as SPEX wrote it before prompts could be
set (byte for byte: the trees of existing runs do not change), through a chat template and
without one; the settings' default prompt is that one."""

from spex.bench.vtime import BenchConfig
from spex.proto import PromptFormat
from spex.shared.content.prompt_style import DEFAULT_STYLE, PromptStyle
from spex.shared.content.prompts import Template, plain_template, prompt_pieces
from spex.shared.runtime.settings import Settings

QUESTION = "What is 2 + 3?"
STEPS = ["Two plus three.", "That is 5."]

PLAIN = (
    "Solve the math problem step by step. Write one short step per line, and end with the final answer "
    "in a box, as in the example.\n\n"
    "Question: A box holds 3 red pens and 5 blue pens. How many pens are in the box?\n\n"
    "The box holds 3 red pens and 5 blue pens.\nTogether that is 3 + 5 = 8 pens.\n"
    "The answer is \\boxed{8}.\n\n"
    "Question: What is 2 + 3?\n\n"
)


class Recording:
    """A tokenizer with a chat template: records the turns and the call it is given."""

    chat_template = "{{ messages }}"

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, str]], dict[str, object]]] = []

    def apply_chat_template(self, turns, **kwargs):
        self.calls.append((turns, kwargs))
        return "".join(f"<{t['role']}>{t['content']}" for t in turns) + "<assistant>"


def test_the_plain_prompt_is_spexs_own_byte_for_byte():
    pieces = prompt_pieces(QUESTION, STEPS, plain_template, DEFAULT_STYLE)
    assert pieces == [PLAIN, "Two plus three.\n", "That is 5.\n"]


def test_through_a_chat_template_the_turns_and_the_call_are_spexs_own():
    tokenizer = Recording()
    head = Template(tokenizer)(QUESTION)
    turns, kwargs = tokenizer.calls[0]
    assert kwargs == {"add_generation_prompt": True, "tokenize": False}  # no template of one's own
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    assert turns[0]["content"] == PLAIN.split("\n\n")[0]
    assert (
        turns[2]["content"] == "The box holds 3 red pens and 5 blue pens.\nTogether that is 3 + 5 = 8 pens.\n"
        "The answer is \\boxed{8}."
    )
    assert head.endswith("<user>What is 2 + 3?<assistant>")


def test_the_settings_and_the_bench_default_to_that_prompt():
    assert Settings().prompt() == PromptFormat() == BenchConfig().prompt_style().format
    assert PromptStyle.of(Settings().step_split, Settings().prompt()) == DEFAULT_STYLE
    assert DEFAULT_STYLE.stop_strings() == ("\n",)
