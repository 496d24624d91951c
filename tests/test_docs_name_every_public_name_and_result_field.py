"""The hand-written reference pages keep up with the code: the Python API's page renders every
name `spex` exports (each by a `::: spex.NAME` block), and the results file's page names every
field a results file holds — a run's, a comparison's, repeated pairs', and a question's record."""

from dataclasses import fields
from pathlib import Path

import spex
from spex.bench.comparison import Comparison
from spex.bench.pairs import compare_pairs
from spex.bench.results import RunSummary
from spex.bench.vtime import BenchConfig

ROOT = Path(__file__).resolve().parents[1]
PYTHON = (ROOT / "docs" / "reference" / "python.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "docs" / "reference" / "results-file.md").read_text(encoding="utf-8")


def test_the_python_api_page_renders_every_exported_name():
    missing = [name for name in spex.__all__ if f"::: spex.{name}\n" not in PYTHON]
    assert not missing, f"docs/reference/python.md renders none of: {', '.join(missing)}"


def test_the_results_file_page_names_every_field():
    repeated = compare_pairs(BenchConfig(questions=2, target=2, mode="spex"), 2).to_json()
    written = {
        *(f.name for f in fields(RunSummary) if f.name != "rewards"),  # rewards are kept, not written
        *(f.name for f in fields(Comparison)),
        *repeated,
        *(f.name for f in fields(spex.QuestionResult)),
        "run",
        "questions",
    }
    missing = sorted(name for name in written if f"`{name}`" not in RESULTS)
    assert not missing, f"docs/reference/results-file.md leaves out: {', '.join(missing)}"
