"""The `spex` parser and the table of its subcommands: for each, the function of its command
group's module that declares its arguments and the one that runs it. The search plug-ins are
loaded first (`spex.shared.runtime.searches`): the commands that name a search take theirs.

A command's module is imported when it runs, not to build the parser: `spex --version` or
`spex submit` never loads the benchmark, the engines or PyTorch."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from rich.console import Console

from spex.cli import bench_args, chaos, client, model, profile, runtime, searches, top
from spex.cli.version import spex_version
from spex.shared.runtime.searches import load_searches
from spex.shared.runtime.settings import ENV

__all__ = ["build_parser", "main"]

# The variable naming the search plug-ins, read here before the settings (the parser's choices
# need them); the setting's own row declares it.
PLUGINS_ENV = next(env for env, (name, _) in ENV.items() if name == "search_plugins")
AddParser = Callable[[argparse._SubParsersAction], None]
Command = Callable[[argparse.Namespace, Console], int]

# Every subcommand: the function that declares its arguments, and the one that runs it (as
# "module:function", imported when it runs), in the order `spex --help` lists them.
COMMANDS: dict[str, tuple[AddParser, str]] = {
    "bench": (bench_args.add_bench_parser, "spex.cli.bench:bench_command"),
    "worker": (runtime.add_worker_parser, "spex.cli.runtime:worker_command"),
    "up": (runtime.add_up_parser, "spex.cli.runtime:up_command"),
    "chaos": (chaos.add_chaos_parser, "spex.cli.chaos:chaos_command"),
    "demo": (runtime.add_demo_parser, "spex.cli.runtime:demo_command"),
    "submit": (client.add_submit_parser, "spex.cli.client:client_command"),
    "result": (client.add_result_parser, "spex.cli.client:client_command"),
    "cancel": (client.add_cancel_parser, "spex.cli.client:client_command"),
    "tree": (client.add_tree_parser, "spex.cli.client:client_command"),
    "model": (model.add_model_parser, "spex.cli.model:model_command"),
    "profile": (profile.add_profile_parser, "spex.cli.profile:profile_command"),
    "top": (top.add_top_parser, "spex.cli.top:top_command"),
    "searches": (searches.add_searches_parser, "spex.cli.searches:searches_command"),
}


def command_of(name: str) -> Command:
    """The function that runs subcommand `name`, its module imported now."""
    module, _, function = COMMANDS[name][1].partition(":")
    command: Command = vars(importlib.import_module(module))[function]
    return command


class _Help(argparse.HelpFormatter):
    """argparse's help, with each option's default where it has one (None and False mean
    "not given": the setting's own default applies, which its help says; a switch, taking no
    value, says what it does instead — `--no-x`'s default True is x's, not the switch's)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        switch = action.nargs == 0
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
            or switch
        ):
            return text
        return f"{text} (default: %(default)s)".strip()


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:  # one line, naming the argument
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="spex", description="SPEX: speculative exploration for tree-of-thought serving")
    p.add_argument("--version", action="version", version=f"spex {spex_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add_parser, _ in COMMANDS.values():
        add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        load_searches(os.environ.get(PLUGINS_ENV, ""))
    except ValueError as exc:
        print(f"spex: error: {exc}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        return command_of(args.command)(args, console)
    except ValueError as exc:
        print(f"spex: error: {exc}", file=sys.stderr)
        return 2
