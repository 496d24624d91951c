"""A system prompt replaces SPEX's instruction and worked example; a step delimiter is the
generation's stop string, the prompt's join between steps and the example's; a chat template of
one's own renders the turns (through the tokenizer, or in a sandbox without one); the
search-and-learn preset is search-and-learn's system prompt and blank-line steps; a question's
preset replaces the deployment's prompt, and its texts replace the preset's."""

import pytest

from spex.proto import PromptFormat, SubmitQuestionRequest
from spex.shared.content.prompt_style import (
    PRESETS,
    SEARCH_AND_LEARN_SYSTEM_PROMPT,
    PromptStyle,
    check_chat_template,
    prompt_format,
    question_format,
    template_text,
)
from spex.shared.content.prompts import (
    EXAMPLE_QUESTION,
    Template,
    example_solution,
    instruction,
    prompt_pieces,
)
from spex.shared.hf.models import train_tokenizer

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}[a]{% endif %}"
)


def test_a_system_prompt_replaces_the_instruction_and_the_example():
    style = PromptStyle(system_prompt="Be terse.")
    plain = Template()("What is 2 + 3?", style)
    assert plain == "Be terse.\n\nQuestion: What is 2 + 3?\n\n"
    chat = Template()("What is 2 + 3?", PromptStyle(system_prompt="Be terse.", chat_template=TEMPLATE))
    assert chat == "[system]Be terse.[user]What is 2 + 3?[a]"
    assert EXAMPLE_QUESTION not in plain + chat


def test_a_step_delimiter_is_the_stop_string_the_join_and_the_examples():
    style = PromptStyle("newline", step_delimiter="\n###\n")
    assert style.stop_strings() == ("\n###\n",)
    pieces = prompt_pieces("Q?", ["One.", "Two."], Template(), style)
    assert pieces[1:] == ["One.\n###\n", "Two.\n###\n"]
    assert example_solution(style).count("\n###\n") == 2 and "\n###\n" in pieces[0]
    assert "as the example does" in instruction(style) and instruction(style) != instruction("newline")
    same = PromptStyle("blank-line", step_delimiter="\n\n")  # the split's own: SPEX's instruction
    assert instruction(same) == instruction("blank-line") and same.stop_strings() == ("\n\n",)


def test_a_chat_template_of_ones_own_goes_through_the_tokenizer():
    tokenizer = train_tokenizer(300)
    head = Template(tokenizer)("What is 2 + 3?", PromptStyle(chat_template=TEMPLATE))
    assert head.startswith("[system]Solve the math problem") and head.endswith("[user]What is 2 + 3?[a]")
    assert Template(tokenizer)("What is 2 + 3?").startswith("<|system|>\n")  # its own otherwise


def test_a_template_that_refuses_a_system_turn_gets_the_system_prompt_in_the_first_user_turn():
    refuses = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}" + TEMPLATE
    )
    head = Template()("Q?", PromptStyle(system_prompt="Be terse.", chat_template=refuses))
    assert head == "[user]Be terse.\n\nQ?[a]"


def test_a_chat_template_that_does_not_compile_is_named_with_its_line():
    with pytest.raises(ValueError, match=r"^chat_template: line 2: "):
        check_chat_template("ok\n{% for m in messages %}")


def test_a_deployments_template_may_be_a_file(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE)
    assert template_text(str(path)) == TEMPLATE and template_text(TEMPLATE) == TEMPLATE
    with pytest.raises(ValueError, match="^chat_template: 'missing.jinja' is neither a file nor"):
        template_text("missing.jinja")


def test_the_search_and_learn_preset():
    sal = PRESETS["search-and-learn"]
    assert sal.step_delimiter == "\n\n" and sal.system_prompt == SEARCH_AND_LEARN_SYSTEM_PROMPT
    assert SEARCH_AND_LEARN_SYSTEM_PROMPT.startswith(
        "Solve the following math problem efficiently and clearly:"
    )
    assert SEARCH_AND_LEARN_SYSTEM_PROMPT.endswith(
        "just the final number or expression that solves the problem."
    )
    assert "$\\boxed{answer}$. I hope it is correct." in SEARCH_AND_LEARN_SYSTEM_PROMPT
    head = Template()("Q?", PromptStyle.of("newline", sal))
    assert head == f"{SEARCH_AND_LEARN_SYSTEM_PROMPT}\n\nQuestion: Q?\n\n"
    assert PromptStyle.of("newline", sal).stop_strings() == ("\n\n",)


def test_a_deployments_texts_replace_its_presets_and_a_questions_replace_those():
    deployment = prompt_format("search-and-learn", step_delimiter="\nStep:")
    assert deployment == PromptFormat(SEARCH_AND_LEARN_SYSTEM_PROMPT, "", "\nStep:")

    def question(**fields) -> PromptFormat:
        return question_format(
            deployment, SubmitQuestionRequest(msg_id="m", query_id="q", question="Q", **fields)
        )

    assert question() == deployment
    assert question(system_prompt="Be terse.") == PromptFormat("Be terse.", "", "\nStep:")
    assert question(prompt_preset="spex") == PromptFormat()  # the preset as a whole
    assert question(prompt_preset="spex", chat_template=TEMPLATE) == PromptFormat("", TEMPLATE, "")
    with pytest.raises(ValueError, match="^prompt_preset: one of spex, search-and-learn"):
        prompt_format("sal")
