"""`spex top`: the cluster's figures in the terminal, refreshed — what the live web view's
header and side panel show, read from the ingress's `GET /v1/overview`."""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

__all__ = ["add_top_parser", "render", "top_command"]


def add_top_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("top", help="the cluster's questions, speculation and workers, live in the terminal")
    t.add_argument("--url", default="http://127.0.0.1:8080", help="the HTTP ingress")
    t.add_argument(
        "--token-file", default=None, help="a file holding the ingress's bearer token (else $SPEX_TOKEN)"
    )
    t.add_argument("--every", type=float, default=1.0, help="seconds between refreshes")
    t.add_argument("--once", action="store_true", help="print one frame and exit")


def _fetch(url: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{url.rstrip('/')}/v1/overview")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return dict(json.loads(reply.read()))
    except urllib.error.HTTPError as exc:
        reason = "a valid token is needed (--token-file)" if exc.code == 401 else f"HTTP {exc.code}"
        raise ValueError(f"--url: {url} answered {reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = str(getattr(exc, "reason", exc))
        raise ValueError(f"--url: cannot reach the ingress at {url}: {reason}") from None


def _num(value: object, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def render(o: dict[str, Any], url: str) -> Group:
    """One frame: the headline figures, the questions in flight, the workers."""
    head = Text.assemble(
        ("SPEX ", "bold"), (url, "dim"), "   in flight ", (str(o["in_flight"]), "bold"),
        "   backlog ", (str(o["backlog"]), "bold"),
        f"   last {o['window_s']:.0f} s: ", (str(o["answered"]), "bold"), " answered, ",
        (_num(o["nodes_per_s"], 1), "bold"), " nodes/s, hit rate ", (_num(o["hit_rate"]), "bold"),
        f" ({o['speculative_adopted']}/{o['speculative_issued']} speculative adopted)",
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
    token = os.environ.get("SPEX_TOKEN", "")
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            raise ValueError(f"--token-file: {args.token_file}: {exc.strerror}") from None
    if args.once:
        console.print(render(_fetch(args.url, token), args.url))
        return 0
    with Live(render(_fetch(args.url, token), args.url), console=console, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(args.every)
                live.update(render(_fetch(args.url, token), args.url))
        except KeyboardInterrupt:
            pass
    return 0
