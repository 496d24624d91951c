"""The prompt a deployment sets (SPEX_SYSTEM_PROMPT, SPEX_CHAT_TEMPLATE, SPEX_STEP_DELIMITER) and the
one a question brings (its submission's fields, over the deployment's) reach the engine: every
generation request the server gets is written with that system prompt through that chat template
(rendered in a sandbox: the generator is given no tokenizer) and stops at that delimiter, and a
child's prompt joins its parent's steps with it; a question without its own gets the deployment's.
Real services on a real Redis, the generator on a server speaking vLLM's API over real HTTP."""

import asyncio

from spex.proto import AnswerResult
from tests.services.cluster import Cluster
from tests.serving.fake_vllm import in_process

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)
OWN = {"system_prompt": "Be terse.", "chat_template": TEMPLATE, "step_delimiter": "\n###\n"}
SEARCH = {"algorithm": "rebase", "target": 2, "seed": 3}
OWN_HEAD = "[system]Be terse.[user]What is 2 + 3?[assistant]"


async def answered(
    redis_url: str, settings: dict, questions: dict[str, dict]
) -> tuple[dict[str, AnswerResult | None], list]:
    """Each question (text -> its own submission fields) searched by real services on the fake
    server: the answers, and every completion request the server got."""
    # The root's steps never answer: a step's text follows from its seed, drawn from the question's
    # random id, and a search answered at its first steps would have no child to look at.
    async with in_process(first_answer_at=1) as (url, fake):
        cluster = Cluster(
            redis_url, "inprocess", engine="vllm", engine_url=url, content="real", reward="logprob",
            max_step_tokens=24, max_depth=3, **settings,
        )  # fmt: skip
        await cluster.start_all()
        try:
            qids = {q: await cluster.client.submit(q, **SEARCH, **own) for q, own in questions.items()}
            answers = {q: await cluster.client.result(qid, timeout_s=60) for q, qid in qids.items()}
        finally:
            await cluster.stop()
        return answers, [b for b in fake.bodies if b["prompt"] != "1"]  # the start-up probe left out


def test_a_deployments_prompt_reaches_every_generation(redis_url):
    answers, bodies = asyncio.run(answered(redis_url, OWN, {"What is 2 + 3?": {}}))
    assert answers["What is 2 + 3?"] is not None and not answers["What is 2 + 3?"].error
    assert bodies and all(b["prompt"].startswith(OWN_HEAD) for b in bodies)
    assert all(b["stop"] == ["\n###\n"] for b in bodies)
    assert any(b["prompt"].endswith(".\n###\n") for b in bodies)  # a child: its parent's step, delimited


def test_a_questions_own_prompt_goes_over_the_deployments(redis_url):
    questions = {"What is 2 + 3?": OWN, "What is 4 + 4?": {}}
    answers, bodies = asyncio.run(answered(redis_url, {"system_prompt": "Answer in French."}, questions))
    assert all(a is not None and not a.error for a in answers.values())
    own = [b for b in bodies if "What is 2 + 3?" in b["prompt"]]
    theirs = [b for b in bodies if "What is 4 + 4?" in b["prompt"]]
    assert own and all(b["prompt"].startswith(OWN_HEAD) for b in own)
    assert all(b["stop"] == ["\n###\n"] for b in own)
    # The deployment's: its system prompt, no chat template (plain text), the split's delimiter.
    head = "Answer in French.\n\nQuestion: What is 4 + 4?\n\n"
    assert theirs and all(b["prompt"].startswith(head) for b in theirs)
    assert all(b["stop"] == ["\n"] for b in theirs)


def test_a_questions_template_that_fails_to_render_fails_the_question_naming_it(redis_url):
    refusing = {"chat_template": "{{ raise_exception('this template takes no question') }}"}
    answers, bodies = asyncio.run(answered(redis_url, {}, {"What is 2 + 3?": refusing}))
    answer = answers["What is 2 + 3?"]
    assert answer is not None and "chat_template: this template takes no question" in answer.error
    assert bodies == []  # nothing reached the engine
