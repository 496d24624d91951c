"""A search plug-in is found by SPEX_SEARCH_PLUGINS or by a `spex.searches` entry point, listed
by `spex searches` with where it came from, and served as every built-in is; one that cannot
be loaded stops the process with one line naming it."""

import json
import os
import subprocess
import sys

import pytest

from spex.proto import SubmitQuestionRequest, submission
from spex.shared.core.search import SEARCHES
from spex.shared.runtime.searches import catalogue, load_searches
from spex.shared.runtime.settings import Settings
from tests.runtime.plugins import EXAMPLE_MODULE, EXAMPLES, install_entry_point, registry_restored

SPEX = [sys.executable, "-m", "spex.cli"]


def _spex(args, **env):
    environment = {**os.environ, **env}
    return subprocess.run([*SPEX, *args], env=environment, capture_output=True, text=True, timeout=120)


@pytest.fixture
def restored():
    with registry_restored():
        yield


def test_the_setting_loads_the_example_and_the_services_limits_take_it(restored, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    settings = Settings(search_plugins=EXAMPLE_MODULE, max_target="pruned_sc=8")
    assert "pruned_sc" in SEARCHES
    entry = next(e for e in catalogue() if e.name == "pruned_sc")
    assert (entry.family, entry.default_selection) == ("bfs", "majority")
    assert entry.parameters == {"threshold": 0.3, "max_steps": 12}
    assert entry.origin == f"SPEX_SEARCH_PLUGINS {EXAMPLE_MODULE}"
    limits = settings.limits
    ask = SubmitQuestionRequest(msg_id="m", query_id="q", question="2+2?", algorithm="pruned_sc", target=8)
    assert submission.validate(ask, limits) is ask
    with pytest.raises(submission.SubmissionError, match=r"^target: at most 8 for pruned_sc"):
        submission.validate(SubmitQuestionRequest(**{**_fields(ask), "target": 9}), limits)
    with pytest.raises(
        submission.SubmissionError, match=r"^params: pruned_sc: threshold must be from 0 to 1$"
    ):
        submission.validate(SubmitQuestionRequest(**{**_fields(ask), "params": {"threshold": 2.0}}), limits)


def _fields(req):
    return {f: getattr(req, f) for f in req.__struct_fields__}


def test_an_entry_point_registers_its_search_in_process(restored, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(install_entry_point(tmp_path)))
    load_searches()
    entry = next(e for e in catalogue() if e.name == "ep_greedy")
    assert entry.origin == "entry point spex-test-greedy"
    assert entry.parameters == {"width": 3} and entry.family == "dfs"


def test_spex_searches_lists_both_routes_with_their_origin(tmp_path):
    install_entry_point(tmp_path)
    run = _spex(
        ["searches", "--json"],
        PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(tmp_path)]),
        SPEX_SEARCH_PLUGINS=EXAMPLE_MODULE,
    )
    assert run.returncode == 0, run.stderr
    origins = {e["name"]: e["origin"] for e in json.loads(run.stdout)}
    assert origins["pruned_sc"] == f"SPEX_SEARCH_PLUGINS {EXAMPLE_MODULE}"
    assert origins["ep_greedy"] == "entry point spex-test-greedy"
    assert origins["beam"] == origins["dvts"] == origins["best_of_n"] == origins["rebase"] == "built-in"


def test_a_plugin_search_runs_lossless_with_speculation_in_the_simulator():
    out = _spex(
        ["bench", "--algorithm", "pruned_sc", "--target", "8", "--questions", "3", "--mode", "compare",
         "--quiet", "--json", "/dev/stdout"],
        PYTHONPATH=str(EXAMPLES),
        SPEX_SEARCH_PLUGINS=EXAMPLE_MODULE,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout[out.stdout.index("{") :])
    assert result["lossless"] is True and result["spex"]["spec_adopted"] > 0


BROKEN = [
    ("nowhere_to_be_found", "cannot import 'nowhere_to_be_found': ModuleNotFoundError"),
    ("spex_test_broken", "cannot import 'spex_test_broken': ZeroDivisionError: division by zero"),
    ("spex_test_empty", "'spex_test_empty' registers no search"),
]


@pytest.mark.parametrize(("module", "problem"), BROKEN)
def test_a_module_that_cannot_be_loaded_is_one_line_naming_the_setting(
    restored, tmp_path, monkeypatch, module, problem
):
    (tmp_path / "spex_test_broken.py").write_text("1 / 0\n")
    (tmp_path / "spex_test_empty.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=f"^SPEX_SEARCH_PLUGINS: {problem}"):
        Settings(search_plugins=module)
    run = _spex(["searches"], PYTHONPATH=str(tmp_path), SPEX_SEARCH_PLUGINS=module)
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("spex: error: SPEX_SEARCH_PLUGINS: ") and problem.split(":")[0] in line


@pytest.mark.parametrize(
    ("value", "name", "problem"),
    [
        ("spex_test_greedy:Params", "ep_greedy", "is not a spex.search.SearchAlgorithm class"),
        ("spex_test_greedy:Greedy", "greedy", "names the search 'ep_greedy'"),
        ("spex_test_greedy:Nothing", "ep_greedy", "cannot load"),
    ],
)
def test_a_bad_entry_point_is_one_line_naming_it(tmp_path, value, name, problem):
    install_entry_point(tmp_path, value, name)
    run = _spex(["searches"], PYTHONPATH=str(tmp_path))
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("spex: error: spex.searches: ") and problem in line


def test_a_plugin_may_not_take_a_built_in_s_name(restored, tmp_path, monkeypatch):
    (tmp_path / "spex_test_broken.py").write_text(
        "from spex.search import SearchAlgorithm, register\n\n"
        "@register\nclass Mine(SearchAlgorithm):\n"
        "    name, family, default_selection = 'beam', 'bfs', 'best'\n\n"
        "    def run(self):\n        return []\n        yield\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="search 'beam' is taken by spex.shared.core.search.beam.BeamSearch"):
        load_searches("spex_test_broken")
