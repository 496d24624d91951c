"""`spex searches`: every search this installation serves — the built-ins and the plug-ins it
loads (the `spex.searches` entry points, SPEX_SEARCH_PLUGINS) — with its family, default answer
selection, parameters and their defaults, and where it came from. Also how a command line
writes a search's parameters (`--param NAME=VALUE`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from spex.shared.runtime.searches import catalogue

__all__ = ["add_searches_parser", "parse_params", "searches_command"]


def add_searches_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "searches",
        help="list the searches served: built-ins and plug-ins, their parameters and where each came from",
    )
    s.add_argument("--json", action="store_true", help="print them as JSON")


def searches_command(args: argparse.Namespace, console: Console) -> int:
    entries = catalogue()
    if args.json:
        print(json.dumps([asdict(e) for e in entries], indent=2))
        return 0
    table = Table(title="Searches")
    for column in ("search", "family", "answer", "parameters (defaults)", "origin"):
        table.add_column(column)
    for e in entries:
        params = ", ".join(f"{k}={v}" for k, v in e.parameters.items()) or "none"
        table.add_row(e.name, e.family, e.default_selection, params, e.origin)
    console.print(table)
    return 0


def parse_params(items: Sequence[str], flag: str = "--param") -> dict[str, float | str]:
    """`NAME=VALUE` items as a search's parameters: a number where VALUE reads as one, else
    its text; ValueError naming the flag for an item without `=`."""
    out: dict[str, float | str] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {item!r}: expected NAME=VALUE")
        try:
            out[key.strip()] = float(raw)
        except ValueError:
            out[key.strip()] = raw.strip()
    return out
