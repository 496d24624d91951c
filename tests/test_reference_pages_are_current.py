"""The docs' reference pages (docs/reference/) are what the code generates, so they cannot
drift: a change to a command, a setting, the wire contract or the HTTP API that leaves its page
behind fails here until `python -m spex.cli.docs_reference` is run. `--check` names the stale
page. Each page lists everything its source declares."""

import argparse
from dataclasses import fields
from pathlib import Path

from spex.cli.docs_reference import PAGES, main, pages, stale
from spex.cli.main import build_parser
from spex.proto import messages
from spex.proto.names import KEYS, STREAMS, Family
from spex.services.ingress.openapi import document
from spex.services.ingress.service import OPEN_PATHS
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.settings_schema import row

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "reference"


def test_the_committed_pages_are_what_the_code_generates():
    assert stale(OUT) == [], "stale: run `python -m spex.cli.docs_reference` and commit docs/reference/"


def test_check_names_a_stale_page_and_writing_makes_it_current(tmp_path, capsys):
    assert main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(PAGES)
    assert main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "wire.md").write_text((tmp_path / "wire.md").read_text() + "edited by hand\n")
    (tmp_path / "cli.md").unlink()
    capsys.readouterr()
    assert main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "cli.md: stale" in err and "wire.md: stale" in err and "http.md" not in err
    assert main(["--out", str(tmp_path)]) == 0 and stale(tmp_path) == []


def _walk(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _walk(sub)


def test_each_page_lists_everything_its_source_declares():
    text = pages()
    for parser in _walk(build_parser()):
        assert f"# {parser.prog}\n" in text["cli.md"] or parser.prog == "spex", parser.prog
        for action in parser._actions:
            for option in action.option_strings:
                assert f"`{option}`" in text["cli.md"] or option in ("-h", "--help"), (parser.prog, option)
    for f in fields(Settings):
        assert f"`{row(f).env}`" in text["settings.md"]
    for name in [*STREAMS, *KEYS]:
        assert f"`{name.pattern if isinstance(name, Family) else name}`" in text["wire.md"]
    for name in messages.__all__:
        if isinstance(getattr(messages, name), type):
            assert f"### {name}\n" in text["wire.md"], name
    for path, operations in document(OPEN_PATHS)["paths"].items():
        for method in operations:
            assert f"### {method.upper()} {path}\n" in text["http.md"], (method, path)
