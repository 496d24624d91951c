"""A benchmark run's prompt (`BenchConfig`'s preset, system prompt, chat template and step
delimiter: what the Python API passes through) reaches its engines: the generator's request is
the question in that system prompt through that template and stops at that delimiter, the reward
model's is the path in its family's layout, and with none of them set the request is SPEX's own."""

from dataclasses import replace

from spex.bench.vtime import BenchConfig
from spex.bench.vtime.content import RealContent
from spex.shared.content.prompt_style import SEARCH_AND_LEARN_SYSTEM_PROMPT
from spex.shared.content.prompts import Template
from spex.shared.core.commands import GenerateCommand, ScoreCommand
from spex.shared.core.tree import Tree

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


class TextEngine:
    """What real content reads of an engine: its prompts (no tokenizer) and a token count."""

    template = Template()
    count_tokens = staticmethod(len)


def requests(cfg: BenchConfig):
    """The generator's request for a question's second step and the reward model's for it."""
    content = RealContent(cfg, TextEngine(), TextEngine())  # type: ignore[arg-type]
    question = content.questions[0]
    tree = Tree(question.query_id, 0, question.prompt_tokens)
    first = tree.child(tree.root, 0)
    first.text = "3 + 5 = 8."
    second = tree.child(first, 0)
    prompt = ((tree.root.id, 10), (first.id, 5))
    gen = content.generate(question, GenerateCommand("j", second, prompt, 32), "g")
    second.text = "The answer is \\boxed{8}."
    score = content.score(question, ScoreCommand(second, (*prompt, (second.id, 6))), "s")
    return question.text, gen, score


def test_a_runs_own_prompt_reaches_the_generator_and_the_reward_model():
    cfg = BenchConfig(
        backend="hf", model="unused", content="real", dataset="easy", questions=1, system_prompt="Be terse.",
        chat_template=TEMPLATE, step_delimiter="\n###\n", prm_kind="step-tag",
    )  # fmt: skip
    question, gen, score = requests(cfg)
    assert "".join(gen.text) == f"[system]Be terse.[user]{question}[assistant]3 + 5 = 8.\n###\n"
    assert gen.stop == ("\n###\n",)
    assert "".join(score.text).endswith("3 + 5 = 8.<extra_0>The answer is \\boxed{8}.<extra_0>")


def test_the_search_and_learn_preset_and_spexs_own():
    sal = BenchConfig(backend="hf", model="unused", content="real", dataset="easy", questions=1,
                      prompt_preset="search-and-learn")  # fmt: skip
    question, gen, _ = requests(sal)
    assert gen.text[0] == f"{SEARCH_AND_LEARN_SYSTEM_PROMPT}\n\nQuestion: {question}\n\n"
    assert gen.stop == ("\n\n",) and gen.text[1] == "3 + 5 = 8.\n\n"
    question, gen, score = requests(replace(sal, prompt_preset="spex"))
    assert gen.text[0].startswith("Solve the math problem step by step. Write one short step per line")
    assert gen.stop == ("\n",)
    assert score.text == (*gen.text[:1], "3 + 5 = 8.\n", "The answer is \\boxed{8}.\n")
