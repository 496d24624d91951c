"""`spex top`: the cluster's figures in the terminal, refreshed — what the live web view's
header and side panel show, read from the ingress's `GET /v1/overview`."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from spex.cli.transport import check_url, flagged, ingress_client, read_token

__all__ = ["add_top_parser", "render", "top_command"]

FETCH_TIMEOUT_S = 5.0  # one frame's request: a refresh that waits longer shows a stale screen


def add_top_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("top", help="the cluster's questions, speculation and workers, live in the terminal")
    t.add_argument("--url", default="http://127.0.0.1:8080", help="the HTTP ingress")
    t.add_argument(
        "--token-file",
        default=None,
        help="a file holding the ingress's bearer token (else $SPEX_TOKEN; none: no token)",
    )
    t.add_argument("--every", type=float, default=1.0, help="seconds between refreshes")
    t.add_argument("--once", action="store_true", help="print one frame and exit")


def _fetch(url: str, token: str) -> dict[str, object]:
    from spex import ClientError

    try:
        return ingress_client(url, token, FETCH_TIMEOUT_S).overview()
    except ClientError as exc:
        raise flagged(exc) from None


def _num(value: object, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def render(o: dict[str, Any], url: str) -> Group:
    """One frame: the headline figures, the questions in flight, the workers."""
    head = Text.assemble(
        ("SPEX ", "bold"), (url, "dim"), "   in flight ", (str(o["in_flight"]), "bold"),
        "   backlog ", (_num(o["backlog"]), "bold"),
        f"   last {o['window_s']:.0f} s: ", (_num(o["answered"]), "bold"), " answered, ",
        (_num(o["nodes_per_s"], 1), "bold"), " nodes/s, hit rate ", (_num(o["hit_rate"]), "bold"),
        f" ({_num(o['speculative_adopted'])}/{_num(o['speculative_issued'])} speculative adopted)",
        "   budget granted ", (_num(o["granted"]), "bold"),
    )  # fmt: skip
    workers = Table(title="workers", title_justify="left", expand=True)
    for column in ("worker", "run", "wait", "prim", "spec", "slots", "KV held", "slack", "pool"):
        workers.add_column(column, justify="left" if column == "worker" else "right")
    for w in o["workers"]:
        kv = f"{w['kv_held'] / max(1, w['kv_capacity']):.0%}"
        workers.add_row(
            w["worker"], str(w["running"]), str(w["waiting"]), str(w["primary"]), str(w["speculative"]),
            str(w["slots"]), kv, _num(w["slack"], 3), _num(w["pool"]),
        )  # fmt: skip
    questions = Table(title="questions in flight (oldest first)", title_justify="left", expand=True)
    for column in ("query", "waiting s", "tree events"):
        questions.add_column(column, justify="left" if column == "query" else "right")
    for q in o["questions"][:20]:
        questions.add_row(q["query_id"], f"{q['waiting_s']:.1f}", str(q["events"]))
    if not o["questions"]:
        questions.add_row("(none)", "", "")
    return Group(head, workers, questions)


def top_command(args: argparse.Namespace, console: Console) -> int:
    if not 0.1 <= args.every <= 3600:
        raise ValueError(f"--every: between 0.1 and 3600 seconds, not {args.every}")
    url, token = check_url(args.url), read_token(args.token_file)
    if args.once:
        console.print(render(_fetch(url, token), url))
        return 0
    with Live(render(_fetch(url, token), url), console=console, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(args.every)
                live.update(render(_fetch(url, token), url))
        except KeyboardInterrupt:
            pass
    return 0
