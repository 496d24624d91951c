"""The client's commands: `spex submit` a question (or a JSONL file of them), `spex result` its
answer, `spex cancel` it, `spex tree` its searched tree. Each reaches the cluster through its
HTTP ingress (`--url`, with `--token-file` where the ingress asks for tokens) or, for an
operator, straight through its Redis (`--redis`): one of the two (`spex.cli.transport`), and
both print the same."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from rich.console import Console

from spex.cli.answers import print_answer, twin_verdict
from spex.cli.searches import parse_params
from spex.proto import MODES, SubmitQuestionRequest
from spex.proto.messages import ANSWER_SELECTIONS, ANSWER_WEIGHTS, PROMPT_PRESETS
from spex.proto.submission import twin_id
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.settings_schema import flag_help

if TYPE_CHECKING:
    from spex.cli.transport import Ingress

__all__ = [
    "add_cancel_parser",
    "add_result_parser",
    "add_submit_parser",
    "add_tree_parser",
    "check_password_file",
    "client_command",
]

MAX_WAIT_S = 86_400.0  # --wait: a day at most (a larger number is a typo, not a plan)
# A submission field's flag: the one validator's errors name the field, the command line's the flag.
FIELD_FLAGS = {
    "question": "question", "client_key": "--client-key", "algorithm": "--algorithm", "target": "--target",
    "mode": "--mode", "reference_answer": "--reference", "early_stop": "--early-stop",
    "early_stop_alpha": "--early-stop-alpha", "early_stop_min_answers": "--early-stop-min",
    "early_stop_weight": "--early-stop-weight", "baseline_twin": "--baseline-twin", "params": "--param",
    "answer_selection": "--answer-selection",
    "prompt_preset": "--prompt-preset", "system_prompt": "--system-prompt",
    "chat_template": "--chat-template", "step_delimiter": "--step-delimiter",
}  # fmt: skip


def _add_where(parser: argparse.ArgumentParser) -> None:
    """The cluster to ask: its ingress (--url) or its Redis (--redis), one of the two."""
    parser.add_argument(
        "--url", default=None, help="the cluster's HTTP ingress, e.g. http://127.0.0.1:8080 (or --redis)"
    )
    parser.add_argument(
        "--token-file",
        default=None,
        help="with --url: a file holding the ingress's bearer token (else $SPEX_TOKEN; none: no token)",
    )
    parser.add_argument(
        "--redis",
        default=None,
        help="an operator's way instead of --url: the cluster's Redis, redis://HOST:PORT",
    )
    parser.add_argument(
        "--redis-password-file",
        default=None,
        help=f"with --redis: {flag_help(Settings, 'redis_password_file')}",
    )


def _add_wait(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--wait", type=float, default=None, help=f"wait up to this many seconds for {what}")


def add_submit_parser(sub: argparse._SubParsersAction) -> None:
    sb = sub.add_parser("submit", help="submit a question (or a JSONL file of them) to the cluster")
    sb.add_argument("question", nargs="?", default=None, help="the question (or give --file)")
    sb.add_argument(
        "--file", default=None, help="JSONL, a 'problem' or 'question' per line (and 'answer': graded)"
    )
    _add_where(sb)
    # A flag left out takes the request's default (SubmitQuestionRequest's are the only ones).
    default = {f.name: f.default for f in msgspec.structs.fields(SubmitQuestionRequest)}
    sb.add_argument(
        "--algorithm",
        default=None,
        help=f"the search: a built-in or one of the cluster's plug-ins (default {default['algorithm']})",
    )
    sb.add_argument("--target", type=int, default=None, help=f"default {default['target']}")
    sb.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a parameter of the search, a number or text (`spex searches` lists each search's)",
    )
    sb.add_argument(
        "--answer-selection", choices=ANSWER_SELECTIONS, default=None, help="default: the search's own"
    )
    sb.add_argument("--mode", choices=list(MODES), default=None, help=f"default {default['mode']}")
    sb.add_argument(
        "--client-key",
        default=None,
        help="idempotency key: submitting again under it gives the first submission's id (KEY/0, KEY/1, ...)",
    )
    _add_wait(sb, "answers")
    sb.add_argument("--reference", default=None, help="grade the answer against this reference answer")
    sb.add_argument(
        "--early-stop",
        action="store_true",
        help="T3: stop the search once its answer is settled (may change it)",
    )
    sb.add_argument(
        "--early-stop-alpha", type=float, default=None, help=f"T3's α (default {default['early_stop_alpha']})"
    )
    sb.add_argument(
        "--early-stop-min",
        type=int,
        default=None,
        help="T3 waits for this many answers (default: the search's rule)",
    )
    sb.add_argument("--early-stop-weight", choices=ANSWER_WEIGHTS, default=None, help="an answer's T3 weight")
    sb.add_argument(
        "--baseline-twin",
        action="store_true",
        help="also search it with speculation off (same seed and search); with --wait, print whether "
        "both trees are the same (lossless)",
    )
    sb.add_argument(
        "--prompt-preset",
        choices=PROMPT_PRESETS,
        default=None,
        help="its prompt's preset (default: the deployment's)",
    )
    sb.add_argument("--system-prompt", default=None, help="its system prompt (default: the deployment's)")
    sb.add_argument(
        "--chat-template",
        default=None,
        metavar="FILE",
        help="its chat template, a Jinja file (default: the deployment's)",
    )
    sb.add_argument("--step-delimiter", default=None, help="what ends its steps (default: the deployment's)")


def add_result_parser(sub: argparse._SubParsersAction) -> None:
    rs = sub.add_parser("result", help="print a question's answer")
    rs.add_argument("query_id", help="the id `spex submit` printed")
    _add_where(rs)
    _add_wait(rs, "the answer")
    rs.add_argument("--tree", default=None, metavar="FILE", help="write the query's tree (JSON) to FILE")


def add_cancel_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("cancel", help="cancel a question's search (an answered one keeps its answer)")
    c.add_argument("query_id", help="the id `spex submit` printed")
    _add_where(c)


def add_tree_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("tree", help="a question's searched tree, as JSON (what the live view draws)")
    t.add_argument("query_id", help="the id `spex submit` printed")
    _add_where(t)
    t.add_argument("--out", default=None, metavar="FILE", help="write it to FILE (default: print it)")


def check_password_file(path: str | None) -> None:
    """A Redis password file that cannot be read: ValueError naming --redis-password-file."""
    if path is None:
        return
    try:
        Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"--redis-password-file: {path}: {exc.strerror}") from None


def client_command(args: argparse.Namespace, console: Console) -> int:
    """`spex submit`, `result`, `cancel` and `tree`, through --url or --redis. Every flag is
    checked before the cluster is asked anything."""
    import asyncio

    from spex.cli.transport import check_redis_url, check_url, read_token

    if (args.url is None) == (args.redis is None):
        raise ValueError(
            "--url / --redis: give one: --url URL (the cluster's HTTP ingress) or, an operator's way, "
            "--redis URL (its Redis)"
        )
    if args.url is not None and args.redis_password_file is not None:
        raise ValueError("--redis-password-file: goes with --redis; the ingress (--url) takes --token-file")
    if args.redis is not None and args.token_file is not None:
        raise ValueError("--token-file: goes with --url; Redis (--redis) takes --redis-password-file")
    wait = getattr(args, "wait", None)
    if wait is not None and not (math.isfinite(wait) and 0 <= wait <= MAX_WAIT_S):
        raise ValueError(f"--wait: seconds, from 0 to {MAX_WAIT_S:.0f}, not {wait}")
    asked = _asked(args) if args.command == "submit" else []
    if args.url is not None:
        from spex.cli.transport import HttpIngress

        ingress = HttpIngress(check_url(args.url), read_token(args.token_file))
        return asyncio.run(_run(ingress, args, asked, console))
    check_redis_url(args.redis)
    check_password_file(args.redis_password_file)
    return _through_redis(args, asked, console)


def _through_redis(
    args: argparse.Namespace, asked: list[tuple[str, dict[str, Any]]], console: Console
) -> int:
    import asyncio

    from redis.exceptions import AuthenticationError, ConnectionError, ResponseError, TimeoutError

    from spex.cli.transport import RedisIngress
    from spex.proto.names import Partitions
    from spex.shared.runtime.availability import refusal
    from spex.shared.runtime.client import IngressClient
    from spex.shared.runtime.connect import redis_client
    from spex.shared.runtime.settings import without_password

    async def run() -> int:
        settings = Settings.from_env(None, redis_url=args.redis, redis_password_file=args.redis_password_file)
        parts = Partitions(settings.partitions)
        client = IngressClient(redis_client(settings), limits=settings.limits, partitions=parts)
        ingress = RedisIngress(client)
        return await _run(ingress, args, asked, console)

    try:
        return asyncio.run(run())
    except AuthenticationError:
        raise ValueError(
            "--redis-password-file: Redis refused the password (or needs one and none was given)"
        ) from None
    except (ConnectionError, TimeoutError) as exc:
        raise ValueError(f"--redis: cannot reach {without_password(args.redis)}: {exc}") from None
    except ResponseError as exc:  # Redis refusing writes (out of memory): not submitted
        if (refused := refusal(exc)) is None:
            raise
        raise ValueError(f"--redis: {refused}; retry later") from None


def _asked(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """Each question to submit and its fields, checked here by the one validator (with no
    operator's limits: the cluster applies its own) so that a bad flag fails before any is sent."""
    from spex.proto import SubmissionError, submission
    from spex.shared.content.datasets import load_questions
    from spex.shared.core.search import SEARCHES

    asked = [(args.question, args.reference)] if args.question else []
    if args.file:
        try:
            asked += [(q.text, q.reference_answer) for q in load_questions(args.file, require_answer=False)]
        except ValueError as exc:
            raise ValueError(f"--file: {exc}") from None
    if not asked:
        raise ValueError("question: give one, or --file with a 'question' or 'problem' per line")
    given = {
        "algorithm": args.algorithm, "target": args.target, "mode": args.mode,
        "params": parse_params(args.param) or None, "answer_selection": args.answer_selection,
        "early_stop": args.early_stop or None, "early_stop_alpha": args.early_stop_alpha,
        "early_stop_min_answers": args.early_stop_min, "early_stop_weight": args.early_stop_weight,
        "baseline_twin": args.baseline_twin or None, "prompt_preset": args.prompt_preset,
        "system_prompt": args.system_prompt, "chat_template": _template(args.chat_template),
        "step_delimiter": args.step_delimiter,
    }  # fmt: skip
    unbounded = submission.Limits(
        max_question_chars=submission.MAX_INT, max_target=dict.fromkeys(SEARCHES, submission.MAX_INT)
    )
    out = []
    for i, (question, reference) in enumerate(asked):
        fields = {k: v for k, v in given.items() if v is not None}
        if reference:
            fields["reference_answer"] = reference
        if args.client_key:
            fields["client_key"] = f"{args.client_key}/{i}"
        try:
            checked = submission.check_fields(fields)
            req = SubmitQuestionRequest(msg_id="", query_id="checked-here", question=question, **checked)
            submission.validate(req, unbounded)
        except SubmissionError as exc:
            raise ValueError(_flagged(str(exc))) from None
        out.append((question, fields))
    return out


def _template(path: str | None) -> str | None:
    """`--chat-template FILE`'s text, checked as the ingress checks a question's."""
    if path is None:
        return None
    from spex.shared.content.prompt_style import check_chat_template

    try:
        text = Path(path).expanduser().read_text()
        check_chat_template(text)
    except OSError as exc:
        raise ValueError(f"--chat-template: {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"--chat-template: {exc}") from None
    return text


def _flagged(message: str) -> str:
    """A submission error ("target: must be ...") as the flag that set the field says it."""
    field, sep, rest = message.partition(": ")
    return f"{FIELD_FLAGS[field]}: {rest}" if sep and field in FIELD_FLAGS else message


async def _run(
    ingress: Ingress, args: argparse.Namespace, asked: list[tuple[str, dict[str, Any]]], console: Console
) -> int:
    try:
        if args.command == "submit":
            return await _submit(ingress, asked, args.wait, console)
        if args.command == "cancel":
            await ingress.cancel(args.query_id)
            console.print(f"{args.query_id}: cancelling", markup=False)
            return 0
        if args.command == "tree":
            return await _tree(ingress, args.query_id, args.out, console)
        return await _result(ingress, args, console)
    finally:
        await ingress.aclose()


async def _submit(
    ingress: Ingress, asked: list[tuple[str, dict[str, Any]]], wait: float | None, console: Console
) -> int:
    qids = []
    for question, fields in asked:
        try:
            qids.append((await ingress.submit(question, fields), bool(fields.get("baseline_twin"))))
        except ValueError as exc:
            raise ValueError(_flagged(str(exc))) from None
    for qid, twinned in qids:
        answer = await ingress.answer(qid, wait) if wait else None
        if answer is None:
            console.print(qid if not wait else f"{qid}: no answer within {wait} s", markup=False)
            continue
        print_answer(console, answer)
        if twinned:
            twin = await ingress.answer(twin_id(qid), wait)
            console.print(f"  baseline twin {twin_id(qid)}: {twin_verdict(answer, twin)}", markup=False)
    return 0


async def _result(ingress: Ingress, args: argparse.Namespace, console: Console) -> int:
    answer = await ingress.answer(args.query_id, args.wait)
    if args.tree:
        await _tree(ingress, args.query_id, args.tree, console, flag="--tree")
    if answer is None:
        console.print(f"{args.query_id}: no answer yet", markup=False)
        return 1
    print_answer(console, answer)
    return 0


async def _tree(
    ingress: Ingress, query_id: str, out: str | None, console: Console, flag: str = "--out"
) -> int:
    tree = await ingress.tree(query_id)
    text = json.dumps(tree, indent=1) + "\n"
    if out is None:
        print(text, end="")
        return 0
    try:
        Path(out).write_text(text)
    except OSError as exc:
        raise ValueError(f"{flag}: {out}: {exc.strerror}") from None
    console.print(f"tree: {len(tree['nodes'])} nodes ({tree['status']}) -> {out}", markup=False)
    return 0
