"""Every argument of every `spex` command says what it is for, and no help claims a default that
says nothing ("(default: None)") or the opposite of what a switch does ("(default: True)" on
`--no-x`): the parser `spex` runs, walked as the CLI reference walks it."""

import argparse

from spex.cli.main import build_parser

UNSAID = ("(default: True)", "(default: False)", "(default: None)")


def parsers(parser):
    """The parser and each of its subcommands', depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def test_every_option_and_positional_has_help():
    bare = [
        f"{p.prog} {'/'.join(a.option_strings) or a.dest}"
        for p in parsers(build_parser())
        for a in p._actions
        if not isinstance(a, argparse._SubParsersAction) and not (a.help or "").strip()
    ]
    assert not bare, f"arguments without help: {bare}"


def test_no_help_shows_a_default_that_misleads():
    shown = [
        f"{p.prog}: {said}"
        for p in parsers(build_parser())
        for said in UNSAID
        if said in " ".join(p.format_help().split())
    ]
    assert not shown, shown
