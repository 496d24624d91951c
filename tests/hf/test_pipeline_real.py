"""`spex up --engine hf` as separate processes answers MATH-500 questions with a model's text,
each answer graded against the dataset's reference."""

from dataclasses import replace

from spex.proto import GenerateResult, ScoreResult
from spex.services.launcher import up
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings
from tests.services.helpers import ask_math500


def test_the_pipeline_answers_three_math500_questions_with_text(redis_url, tiny_model, tiny_prm):
    settings = Settings(
        engine="hf",
        model=tiny_model,
        prm=tiny_prm,
        content="real",
        max_step_tokens=16,
        max_depth=2,
        http_port=free_port(),
        block_ms=50,
    )
    with up(replace(settings), redis_url=redis_url) as live:
        answers, inboxes = ask_math500(live.redis_url)
    assert all(a is not None for a in answers), "a question was not answered"
    for answer, events in zip(answers, inboxes, strict=True):
        assert answer.correct is not None  # graded (a random model's answers are wrong)
        assert answer.nodes >= 2
        steps = [e for e in events if isinstance(e, GenerateResult)]
        scores = [e for e in events if isinstance(e, ScoreResult)]
        assert steps and all(e.text and not e.text.startswith("Step ") for e in steps)  # a model's text
        assert all(0.0 < s.reward < 1.0 for s in scores) and scores  # the reward model's
