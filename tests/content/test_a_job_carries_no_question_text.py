"""A job carries none of its question's own prompt texts (they are in its stored request, up to
32,000 characters each): what the job carries and the stored request settle, at the worker, the
prompt the coordinator settled, whatever the deployment's and the question's texts and presets."""

import itertools

from spex.proto import SubmitQuestionRequest
from spex.shared.content.prompt_style import carried_format, prompt_format, question_format
from spex.shared.runtime.reserve import request_bytes

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}" + " " * 30_000


def test_what_a_job_carries_and_the_stored_request_settle_the_same_prompt():
    deployments = [
        prompt_format(),
        prompt_format("search-and-learn"),
        prompt_format("spex", "Be brief.", "{{ x }}", "\n#\n"),
    ]
    texts = itertools.product(
        ["", "search-and-learn", "spex"], ["", "Own system."], ["", TEMPLATE], ["", "\n##\n"]
    )
    for deployment, (preset, system, template, delimiter) in itertools.product(deployments, texts):
        question = SubmitQuestionRequest(
            msg_id="m", query_id="q", question="What is 2 + 3?", prompt_preset=preset, system_prompt=system,
            chat_template=template, step_delimiter=delimiter,
        )  # fmt: skip
        settled = question_format(deployment, question)
        carried = carried_format(settled, question)
        assert question_format(carried, question) == settled, (deployment, question)
        assert (system == "" or system not in carried.system_prompt) and TEMPLATE not in carried.chat_template


def test_admission_counts_a_questions_own_texts():
    plain = SubmitQuestionRequest(
        msg_id="m", query_id="q", question="What is 2 + 3?", algorithm="rebase", target=4
    )
    own = SubmitQuestionRequest(
        msg_id="m", query_id="q", question="What is 2 + 3?", algorithm="rebase", target=4,
        system_prompt="S" * 1000, chat_template=TEMPLATE,
    )  # fmt: skip
    assert request_bytes(own) - request_bytes(plain) >= len(TEMPLATE) + 1000
