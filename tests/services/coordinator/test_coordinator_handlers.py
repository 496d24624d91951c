"""The coordinator's event and command tables are pure: tested with plain objects, no Redis."""

import typing

import msgspec

from spex.proto import (
    PRIMARY,
    BudgetUpdateEvent,
    CancelRequest,
    GenerateRequest,
    GenerateResult,
    LogprobSummary,
    PromoteRequest,
    PromptFormat,
    ScoreRequest,
    ScoreResult,
    SubmitQuestionRequest,
    Synthetic,
)
from spex.proto.names import GEN_CONTROL, SCORE_JOBS
from spex.services.coordinator.handlers import (
    COMMAND_HANDLERS,
    EVENT_HANDLERS,
    Answer,
    Dispatch,
    MarkCancelled,
    Outgoing,
    effects,
    failed,
)
from spex.shared.content.prompts import DEFAULT_TEMPERATURE, stop_strings
from spex.shared.core.commands import CancelCommand, Command, FinishCommand, PromoteCommand, ScoreCommand
from spex.shared.core.ids import digest
from spex.shared.core.machine import QueryMachine
from spex.shared.core.search import SearchConfig
from spex.shared.core.speculation import SpecPolicy

REQUEST = SubmitQuestionRequest(
    msg_id="submit/k", query_id="q7", trace_id="t", question="2+2?", algorithm="rebase", target=4, seed=3
)


def outgoing(machine=None):
    machine = machine or QueryMachine("q7", 20, SearchConfig("rebase", 4), 3, speculation=SpecPolicy(True))
    return Outgoing(REQUEST, epoch=5, machine=machine)


def test_every_command_type_has_a_handler():
    assert set(COMMAND_HANDLERS) == set(typing.get_args(Command))


def test_generate_commands_become_job_messages_with_deterministic_ids():
    q = outgoing()
    commands = q.machine.start(0.0)
    first, again = effects(q, commands), effects(q, commands)
    assert first == again  # a replay publishes the same message ids: the copies are dropped
    assert len(first) == 4 and all(isinstance(e, Dispatch) for e in first)  # the router picks the stream
    msg = first[0].message
    assert isinstance(msg, GenerateRequest)
    node = commands[0].node
    assert (msg.job_id, msg.node_id, msg.parent_id, msg.child_index) == (
        commands[0].job_id,
        node.id,
        q.machine.tree.root.id,
        node.index,
    )
    assert msg.prompt_node_ids == [q.machine.tree.root.id] and msg.prompt_tokens == [20]
    assert (msg.epoch, msg.trace_id, msg.synthetic, msg.seed) == (5, "t", Synthetic(3, "bfs"), node.seed)
    assert msg.msg_id == f"q7/{commands[0].job_id}/gen"


def test_score_cancel_promote_and_finish():
    q = outgoing()
    node = q.machine.start(0.0)[0].node
    (score,) = effects(q, [ScoreCommand(node, ((q.machine.tree.root.id, 20), (node.id, 9)), priority=1)])
    assert score.stream == SCORE_JOBS and isinstance(score.message, ScoreRequest)
    assert score.message.prompt_tokens == [20, 9] and score.message.priority == 1

    mark, publish = effects(q, [CancelCommand("n.0")])
    assert mark == MarkCancelled("q7", "n.0")  # a queued job checks this before it starts
    assert publish.stream == GEN_CONTROL and isinstance(publish.message, CancelRequest)
    assert publish.message.job_id == "n.0"

    (promote,) = effects(q, [PromoteCommand("n.0")])  # fanned out: whoever has the job raises it
    assert promote.stream == GEN_CONTROL and isinstance(promote.message, PromoteRequest)
    assert (promote.message.job_id, promote.message.priority, promote.message.epoch) == ("n.0", PRIMARY, 5)
    assert promote.message.msg_id == "q7/n.0/promote"

    (answer,) = effects(q, [FinishCommand("q7", "4")])
    assert isinstance(answer, Answer)
    m = q.machine
    assert answer.message.tree_digest == digest(m.tree.digest(rewards=True), m.answer)  # synthetic
    assert (answer.message.answer, answer.message.epoch) == ("4", 5)


def test_an_answer_records_the_grade_and_latency_it_is_given_as_returned():
    q = Outgoing(REQUEST, 5, outgoing().machine, latency_s=2.5, correct=True)
    (answer,) = effects(q, [FinishCommand("q7", "4")])
    assert (answer.message.latency_s, answer.message.correct) == (2.5, True)
    fail = failed(q, "a job too large")
    assert (fail.message.error, fail.message.latency_s) == ("failed: a job too large", 2.5)


def test_inbox_events_drive_the_machine():
    q = outgoing()
    first = q.machine.start(0.0)[0]
    result = GenerateResult(
        msg_id="r", query_id="q7", job_id=first.job_id, node_id=first.node.id, text="Step 1: x", tokens=9
    )
    commands = EVENT_HANDLERS[GenerateResult](q.machine, result, 1.0)
    assert any(isinstance(c, ScoreCommand) and c.node.id == first.node.id for c in commands)
    EVENT_HANDLERS[BudgetUpdateEvent](
        q.machine, BudgetUpdateEvent(msg_id="b", query_id="q7", share=3, k_total=9), 1.0
    )
    assert q.machine.share == 3
    cancels = EVENT_HANDLERS[CancelRequest](q.machine, CancelRequest(msg_id="c", query_id="q7"), 2.0)
    assert q.machine.done and q.machine.cancelled and isinstance(cancels[-1], FinishCommand)


def test_a_reward_or_log_probability_that_is_not_a_number_fails_the_query_not_the_service():
    for bad in (float("nan"), float("inf"), float("-inf")):
        q = outgoing()
        first = q.machine.start(0.0)[0]
        step = GenerateResult(
            msg_id="r", query_id="q7", job_id=first.job_id, node_id=first.node.id, text="x", tokens=9
        )
        EVENT_HANDLERS[GenerateResult](q.machine, step, 1.0)
        score = ScoreResult(msg_id="s", query_id="q7", job_id="s1", node_id=first.node.id, reward=bad)
        commands = EVENT_HANDLERS[ScoreResult](q.machine, score, 2.0)
        assert q.machine.done and "reward" in (q.machine.error or "")
        assert isinstance(commands[-1], FinishCommand)

        q = outgoing()
        first = q.machine.start(0.0)[0]
        step = msgspec.structs.replace(step, job_id=first.job_id, node_id=first.node.id)
        step = msgspec.structs.replace(step, logprobs=LogprobSummary(mean=bad, min=bad, count=9))
        EVENT_HANDLERS[GenerateResult](q.machine, step, 1.0)
        assert q.machine.done and "log-probability" in (q.machine.error or "")


def test_a_generation_carries_the_sampling_temperature_it_is_set_to():
    q = Outgoing(REQUEST, epoch=5, machine=outgoing().machine, content="real", temperature=0.0)
    (publish,) = effects(q, q.machine.start(0.0)[:1])
    assert isinstance(publish.message, GenerateRequest) and publish.message.temperature == 0.0
    (default,) = effects(outgoing(), outgoing().machine.start(0.0)[:1])
    assert default.message.temperature == DEFAULT_TEMPERATURE  # as the bench's --sampling-temperature


def test_a_generation_carries_its_split_s_stop_strings_and_minimum_length():
    q = Outgoing(REQUEST, 5, outgoing().machine, "real", split="numbered", min_step_tokens=6)
    (publish,) = effects(q, q.machine.start(0.0)[:1])
    message = publish.message
    assert isinstance(message, GenerateRequest) and message.split == "numbered" and message.min_tokens == 6
    assert tuple(message.stop) == stop_strings("numbered")
    (synthetic,) = effects(outgoing(), outgoing().machine.start(0.0)[:1])
    assert synthetic.message.stop == [] and synthetic.message.min_tokens == 0
    assert message.synthetic is None  # the simulator's extension: on synthetic jobs alone


def test_a_questions_prompt_rides_on_its_jobs_and_its_delimiter_is_the_stop():
    prompt = PromptFormat("Be terse.", "{{ messages }}", "\n###\n")
    q = Outgoing(REQUEST, 5, outgoing().machine, "real", prompt=prompt)
    (publish,) = effects(q, q.machine.start(0.0)[:1])
    message = publish.message
    assert isinstance(message, GenerateRequest) and message.prompt == prompt and message.stop == ["\n###\n"]
    node = q.machine.tree.nodes[message.node_id]
    (score,) = effects(q, [ScoreCommand(node, ((q.machine.tree.root.id, 5), (node.id, 3)))])
    # The reward model reads the path in its own chat template: the generator's stays behind.
    assert isinstance(score.message, ScoreRequest)
    assert score.message.prompt == PromptFormat("Be terse.", "", "\n###\n")
