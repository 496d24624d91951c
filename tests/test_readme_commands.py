"""Every `spex` command the README shows parses with the real command line (its subcommand and
flags exist, its values are accepted), and its quick start is the two make targets `.ci/run`
and a new user run; every file it links is in the repository."""

import re
import shlex
from pathlib import Path

import pytest

from spex.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```sh\n(.*?)```", README, re.S)


def spex_commands() -> list[list[str]]:
    """The arguments of each `.venv/bin/spex …` line of the README's shell blocks (a line ending
    in a backslash goes on), comments dropped."""
    commands = []
    for block in BLOCKS:
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].endswith("bin/spex"):
                commands.append(words[1:])
    return commands


def test_the_quick_start_is_the_two_make_targets():
    first = shlex.split(BLOCKS[0], comments=True)
    assert first == ["make", "demo", "make", "test"]
    assert "make test" in (ROOT / ".ci/run").read_text()


@pytest.mark.parametrize("argv", spex_commands(), ids=lambda argv: " ".join(argv)[:60])
def test_each_spex_command_parses(argv):
    args = build_parser().parse_args(argv)
    assert args.command == argv[0]


def test_the_readme_shows_spex_commands_and_is_short():
    assert len(spex_commands()) >= 4
    assert len(README.splitlines()) < 200


def test_every_file_the_readme_links_exists():
    links = [link.split("#")[0] for link in re.findall(r"\]\(([^)]+)\)", README) if "://" not in link]
    assert links and not [link for link in links if not (ROOT / link).exists()]
