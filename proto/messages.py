"""Every message that crosses a process boundary (IPC structs only, nothing else).

Encoded as MessagePack maps with fields by name; unknown fields are ignored on decode so
services can be upgraded one at a time. Each struct carries the envelope fields of
`Message` and a `type` tag (its class name) that decoders dispatch on. Naming rule: a
struct's name ends in its role — `…Request` (asks for work), `…Result` (answers one), or
`…Event` (reports a fact).

A field that takes one of a closed set of values has that set's `Literal` type (`Content`,
`SimStyle`, `FinishReason`, `JobKind`), so msgspec refuses any other value at decode and the
codec names the field; each set's values are also a tuple (`CONTENTS`, ...) for the checks and
the CLI's choices. A set is closed: a new value is a protocol change (deploy its readers first).
A submission's `algorithm` and `mode` stay `str` on the wire, checked by `spex.proto.submission`
(the search against the searches the services have registered, which plug-ins extend; the mode
against `MODES`): a submission with a bad value must still decode to be answered as rejected
(its client told, its in-flight place freed).
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

import msgspec

__all__ = [
    "ANSWER_SELECTIONS",
    "ANSWER_WEIGHTS",
    "CONTENTS",
    "FINISH_REASONS",
    "JOB_KINDS",
    "MAX_MESSAGE_BYTES",
    "MODES",
    "NODE_STATES",
    "PRIMARY",
    "PROMPT_PRESETS",
    "PROTOCOL_VERSION",
    "REWARDS",
    "SIM_STYLES",
    "SPECULATIVE",
    "SPLITS",
    "WIRE_SPLIT",
    "AnswerResult",
    "AnswerSelection",
    "AnswerWeight",
    "BudgetUpdateEvent",
    "CancelRequest",
    "Content",
    "FinishReason",
    "GenerateRequest",
    "GenerateResult",
    "JobFailedEvent",
    "JobKind",
    "LogprobSummary",
    "Message",
    "Mode",
    "NodeEvent",
    "NodeFinishReason",
    "NodeState",
    "PromoteRequest",
    "PromptFormat",
    "PromptPreset",
    "QueryStatsEvent",
    "Reward",
    "ScoreRequest",
    "ScoreResult",
    "ServedBy",
    "SimStyle",
    "Split",
    "SubmitQuestionRequest",
    "Synthetic",
    "WorkerLoadEvent",
]

# A decoder rejects any other version (dead-lettered, never guessed). Still 1 with the typed
# value sets and without ScoreRequest.reward: the values on the wire are the ones always sent,
# and a reader ignores a field it does not know and defaults one it is not sent, so old and
# new services read each other's messages.
PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20  # an encoded message may not be larger (1 MiB), either way

Content = Literal["synthetic", "real"]  # what a job's text is: the synthetic workload's, or a model's
SimStyle = Literal["bfs", "dfs"]  # the synthetic workload's step-length model: its search's family
FinishReason = Literal["stop", "eos", "length", "abort"]  # stop: the step delimiter (or a stop string)
NodeFinishReason = Literal[FinishReason, ""]  # a tree node's: "" until it is generated
JobKind = Literal["generate", "score"]  # the job a JobFailedEvent reports
Mode = Literal["baseline", "spex"]  # a query searched plainly, or with speculation
Split = Literal["blank-line", "newline", "numbered"]  # real content: where one step ends (content.prompts)
NodeState = Literal["root", "primary", "adopted", "speculative", "cancelled", "unused"]  # NodeEvent
Reward = Literal["prm", "logprob"]  # a step's reward: a reward model's score, or the step's log-probability
AnswerWeight = Literal["min", "last"]  # T3: an answer weighs its path's lowest step reward, or its own
AnswerSelection = Literal["majority", "weighted", "best"]  # a search's final answer among its solutions
# Real content: a named prompt (its texts are `spex.shared.content.prompt_style`'s): SPEX's own
# instruction and worked example, or search-and-learn's system prompt and blank-line steps.
PromptPreset = Literal["spex", "search-and-learn"]

CONTENTS: tuple[Content, ...] = get_args(Content)
SIM_STYLES: tuple[SimStyle, ...] = get_args(SimStyle)
FINISH_REASONS: tuple[FinishReason, ...] = get_args(FinishReason)
JOB_KINDS: tuple[JobKind, ...] = get_args(JobKind)
MODES: tuple[Mode, ...] = get_args(Mode)
SPLITS: tuple[Split, ...] = get_args(Split)
ANSWER_WEIGHTS: tuple[AnswerWeight, ...] = get_args(AnswerWeight)
ANSWER_SELECTIONS: tuple[AnswerSelection, ...] = get_args(AnswerSelection)
NODE_STATES: tuple[NodeState, ...] = get_args(NodeState)
REWARDS: tuple[Reward, ...] = get_args(Reward)
PROMPT_PRESETS: tuple[PromptPreset, ...] = get_args(PromptPreset)
# A job's split when its message names none: blank-line steps, the ones a sender that does not
# name a split writes.
# Coordinators always send theirs (a run's default is DEFAULT_SPLIT, spex.shared.content.prompts).
WIRE_SPLIT: Split = "blank-line"

PRIMARY = 0  # engine priority of jobs the search is waiting on
SPECULATIVE = 1  # engine priority of jobs generated ahead of the search


class Message(msgspec.Struct, tag_field="type", tag=lambda name: name, kw_only=True, frozen=True):
    """Envelope fields common to every message."""

    v: int = PROTOCOL_VERSION
    msg_id: str  # unique per logical message; stays the same across retries (dedupe key)
    query_id: str
    trace_id: str = ""
    attempt: int = 0  # set by the coordinator, not Redis's delivery count
    epoch: int = 0  # fencing token of the coordinator lease that issued it
    created_ms: int = 0
    deadline_ms: int = 0  # absolute; 0 = none


class SubmitQuestionRequest(Message, frozen=True):
    """A client asks for one question to be searched. The defaults here are the only ones:
    `spex.proto.submission` validates every field, for every way in."""

    question: str
    client_key: str = ""  # idempotency key: the same key is answered once
    algorithm: str = "rebase"  # a registered search's name (checked by spex.proto.submission)
    target: int = 16  # REBASE/ETS width, or MCTS rollouts
    # The search's parameters by name (`spex searches` lists each search's, with its defaults);
    # what a name means and allows is the search's own (checked by spex.proto.submission).
    params: dict[str, float | str] = {}
    answer_selection: str = ""  # "" (the search's own), or one of majority, weighted, best
    seed: int = 0
    mode: str = "spex"  # one of MODES (checked by spex.proto.submission)
    prompt_tokens: int = 0  # the question's length in tokens (0: estimated from the text)
    reference_answer: str = ""  # if given, the answer is graded against it (math-verify)
    client: str = ""  # who submitted it (the ingress token's name; "" without auth)
    # T3, adaptive early termination (off: the search runs to its end; on, it may change the
    # answer). Defaults as `spex.shared.core.spec.early_stop.EarlyStop`'s; 0 answers: the family's rule.
    early_stop: bool = False
    early_stop_alpha: float = 0.5
    early_stop_min_answers: int = 0
    early_stop_weight: str = "min"  # one of ANSWER_WEIGHTS (checked by spex.proto.submission)
    # Lossless, checkable: the same question, seed and search also run with speculation off (a
    # second query, `twin_id`), and the answer reports both trees' digests.
    baseline_twin: bool = False
    twin_of: str = ""  # set by the ingress on a twin: the query it twins (whose tree it grows)
    # Real content: this question's prompt, over the deployment's (SPEX_PROMPT_PRESET and the
    # rest): a preset replaces the deployment's prompt as a whole, then each text given replaces
    # the preset's ("" everywhere: the deployment's prompt).
    prompt_preset: str = ""  # one of PROMPT_PRESETS (checked by spex.proto.submission)
    system_prompt: str = ""  # the system turn, in place of SPEX's instruction and worked example
    chat_template: str = ""  # a Jinja chat template in place of the generator's tokenizer's
    step_delimiter: str = ""  # what ends a step: the generation's stop string and the prompt's join


class Synthetic(msgspec.Struct, frozen=True):
    """The simulator's extension of a job: where the synthetic workload's step (or reward)
    comes from — its world seed, and the step-length model of the search's family. Set on
    jobs of synthetic content only, and read only by the synthetic content source."""

    seed: int = 0
    style: SimStyle = "bfs"
    question: str = ""  # the synthetic question's key ("": the job's query id; a twin's: its original's)


class PromptFormat(msgspec.Struct, frozen=True):
    """Real content: how a job's question and steps are written for the model, beyond its
    split ("" each: as the split and SPEX's own prompt have it; `spex.shared.content.prompt_style`
    reads it). The coordinator settles it per question (the submission's over the deployment's)."""

    system_prompt: str = ""  # the system turn, in place of SPEX's instruction and worked example
    chat_template: str = ""  # the generator's chat template (Jinja), in place of its tokenizer's
    step_delimiter: str = ""  # ends each step (the stop string; the prompt's join), in place of the split's


class GenerateRequest(Message, frozen=True):
    """Generate one node: the step after `prompt_node_ids`, sampled with `seed`. A real
    engine builds its prompt from the question and `steps` (the text of every step on the path,
    carried inline); the question is the request's, stored once under the query
    (`question_stored`), not carried by each of the jobs that can be queued at once (see
    docs/architecture.md for the measurements behind both choices)."""

    job_kind: ClassVar[JobKind] = "generate"  # not on the wire: what a JobFailedEvent says of it
    job_id: str
    node_id: str
    parent_id: str
    child_index: int
    action: str
    prompt_node_ids: list[str]  # the path, root (question) first
    prompt_tokens: list[int]  # token count per path entry (for caches and simulators)
    seed: int
    max_new_tokens: int = 256
    temperature: float = 1.0
    stop: list[str] = []
    priority: int = PRIMARY
    content: Content = "synthetic"
    synthetic: Synthetic | None = None  # synthetic content: the simulator's extension
    question: str = ""
    steps: list[str] = []  # the text of each step on the path, root's child first
    split: Split = WIRE_SPLIT  # real content: how steps are delimited (its stop strings, its prompt)
    min_tokens: int = 0  # real content: a stop string before this many tokens does not end the step
    prompt: PromptFormat = PromptFormat()  # real content: the question's system prompt, template, delimiter
    question_stored: bool = False  # `question` is not carried: it is the query's stored request's


class LogprobSummary(msgspec.Struct, frozen=True):
    mean: float = 0.0
    min: float = 0.0
    count: int = 0


class GenerateResult(Message, frozen=True):
    job_id: str
    node_id: str
    text: str
    tokens: int
    cached_tokens: int = 0
    finish_reason: FinishReason = "stop"
    logprobs: LogprobSummary = LogprobSummary()
    worker: str = ""


class JobFailedEvent(Message, frozen=True):
    """A job its service gave up on (the engine refused it, or its handler kept failing):
    the coordinator drops a speculative job and fails the query for a job it waits on."""

    job_id: str
    node_id: str
    kind: JobKind
    reason: str


class CancelRequest(Message, frozen=True):
    """Abort a job (speculation missed, or the query was cancelled)."""

    job_id: str = ""  # empty: every job of the query
    reason: str = ""


class PromoteRequest(Message, frozen=True):
    """Raise a job's engine priority: the search now waits on a job it generated ahead
    (fanned out on the control stream; the worker running the job applies it)."""

    job_id: str
    priority: int = PRIMARY


class ScoreRequest(Message, frozen=True):
    job_kind: ClassVar[JobKind] = "score"  # not on the wire: what a JobFailedEvent says of it
    job_id: str
    node_id: str
    prompt_node_ids: list[str]  # the path including the node to score
    prompt_tokens: list[int]
    priority: int = PRIMARY
    content: Content = "synthetic"
    synthetic: Synthetic | None = None  # synthetic content: the simulator's extension
    question: str = ""
    steps: list[str] = []  # the text of each step on the path, the scored one last
    split: Split = WIRE_SPLIT  # real content: how the steps are joined in the prompt
    prompt: PromptFormat = PromptFormat()  # real content: the question's system prompt and delimiter
    question_stored: bool = False  # `question` is not carried: it is the query's stored request's


class ScoreResult(Message, frozen=True):
    job_id: str
    node_id: str
    reward: float


class BudgetUpdateEvent(Message, frozen=True):
    """The allocator's speculative share for one query (T2)."""

    share: int
    k_total: int


class QueryStatsEvent(Message, frozen=True):
    """A coordinator's view of one query, for the budget allocator."""

    # The value of each speculative job it has in flight, and of each new candidate it could
    # issue now in its predictor's order, as if it ran alone on its engine: the probability
    # that its search uses it (calibrated by its hits) times what a use saves.
    running: list[float]
    offers: list[float]
    prefix_tokens: int  # the context each of its sequences decodes over
    active_jobs: int
    worker: str = ""  # the generator its jobs are routed to ("" unrouted: any worker's)
    algorithm: str = ""  # its search's (what a use saves depends on how many share the engine)
    # The prompt tokens each offer computes before it decodes (its uncached tail), in the
    # offers' order, and the tokens a step of the query takes (0: unknown), which the
    # controller spreads that prompt over.
    offer_prompts: list[int] = msgspec.field(default_factory=list)
    step_tokens: float = 0.0


class WorkerLoadEvent(Message, frozen=True):
    """A generator's engine load, for the budget allocator and autoscalers. It is stored
    under the worker's load key with a TTL, so its presence is the worker's liveness.
    `query_id` is empty: the event is about a worker, not a query."""

    worker: str
    primary: int  # primary jobs admitted or queued
    primary_ctx: int  # their summed context tokens
    spec: int  # speculative jobs admitted or queued
    running: int
    waiting: int
    kv_held: int  # KV tokens held by admitted requests
    kv_capacity: int
    prefix_cache_hit_rate: float = 0.0
    jobs_done: int = 0
    jobs: int = 0  # jobs the worker holds (taken from its streams, not yet finished)
    slots: int = 0  # the most it takes at once (SPEX_WORKER_SLOTS); 0: unknown
    queries: int = 0  # distinct queries its jobs belong to
    prompt_tokens: int = 0  # prompt tokens its engine looked up in its prefix cache, so far
    cached_tokens: int = 0  # of those, found there
    # Cumulative, for the allocator's TPOT governor: primary decode steps, and Σ primaries ×
    # step time, measured and as the steps would have taken without speculative work.
    primary_steps: int = 0
    primary_step_s: float = 0.0
    primary_alone_s: float = 0.0


class ServedBy(msgspec.Struct, frozen=True):
    """What answered a question: the engine, its model, what it wrote (the model's text, or the
    synthetic workload's stand-ins: a demonstration) and what rewarded its steps.

    The wire carries these four fields only. A reader is shown them by
    `spex.shared.runtime.views.served_json` (an answer's `served_by` over HTTP, the CLI): the
    model null where it is "", the reward of synthetic content as `sim-prm` or `sim-logprob`, and
    for synthetic content a `demonstration` sentence besides."""

    engine: str = ""  # sim (a simulated GPU) | hf (in process) | vllm | sglang
    model: str = ""  # the generator's model (a directory or a served name; "" on sim)
    content: Content = "synthetic"
    reward: Reward = "prm"  # a reward model's or the model's own (synthetic content: their simulated draws)


class AnswerResult(Message, frozen=True):
    answer: str | None
    correct: bool | None = None  # graded against the request's reference answer, if it had one
    solution: list[str] = []  # the steps of the best solution with the chosen answer
    nodes: int = 0
    tokens_generated: int = 0
    latency_s: float = 0.0
    tree_digest: str = ""
    error: str = ""  # why the query failed (a job its service gave up on); "" if it did not
    early_stopped: bool = False  # T3 stopped the search: `nodes` are what it kept
    cancelled: bool = False  # its client cancelled it before it was answered
    spec_issued: int = 0  # speculative jobs issued for it (0 for a baseline query)
    spec_adopted: int = 0  # ... that the search used
    served_by: ServedBy | None = None  # None: from a coordinator that does not record it


class NodeEvent(Message, frozen=True):
    """A node of a query's tree changed (the coordinator's view, `spex.shared.core.view`):
    for watchers only (the ingress's tree, its live view); nothing reads it to decide."""

    node_id: str
    state: NodeState
    parent_id: str = ""  # "" for the root
    index: int = -1
    action: str = ""
    depth: int = 0
    generated: bool = False
    running: bool = False
    text: str = ""
    tokens: int = 0
    answer: str | None = None
    reward: float | None = None
    finish_reason: NodeFinishReason = ""
    t_s: float = 0.0  # seconds since the coordinator took the query up
