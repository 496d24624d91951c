"""An evaluation's results are plain values: a record per question, a pandas frame indexed by
query id, and a results file holding `spex bench`'s figures and the questions' records; a
comparison's frame has both runs side by side. Without pandas, `to_pandas` says what to install
and `to_records` still works."""

import json
import sys

import pytest

import spex


@pytest.fixture(scope="module")
def both():
    return spex.evaluate(
        spex.load_dataset("easy", limit=3), algorithm="rebase", target=4, mode="compare", progress=False
    )


def test_a_run_is_records_a_frame_and_a_results_file(both, tmp_path):
    run = both.spex
    records = run.to_records()
    assert [r["query_id"] for r in records] == ["q00000", "q00001", "q00002"]
    assert set(records[0]) == {f for f in spex.QuestionResult.__dataclass_fields__}
    assert isinstance(records[0]["solution"], list) and records[0]["solution"] == list(run[0].solution)
    frame = run.to_pandas()
    assert (
        list(frame.index) == ["q00000", "q00001", "q00002"] and frame.loc["q00001", "answer"] == run[1].answer
    )
    assert frame["correct"].tolist() == [r.correct for r in run]
    run.write_json(tmp_path / "out" / "run.json")
    written = json.loads((tmp_path / "out" / "run.json").read_text())
    assert written["questions"] == records and written["trees_digest"] == run.summary["trees_digest"]
    assert written["mode"] == "spex" and written["hit_rate"] == run.hit_rate


def test_a_comparison_is_side_by_side(both, tmp_path):
    frame = both.to_pandas()
    assert frame["same_tree"].all() and (frame["answer_baseline"] == frame["answer_spex"]).all()
    assert (frame["speculative_issued_baseline"] == 0).all() and frame["speculative_issued_spex"].sum() > 0
    both.write_json(tmp_path / "both.json")
    written = json.loads((tmp_path / "both.json").read_text())
    assert written["lossless"] is True and written["mode"] == "compare"
    assert written["spex"]["questions"] == both.spex.to_records()
    assert written["baseline"]["questions"] == both.baseline.to_records()


def test_without_pandas_the_frame_says_what_to_install(both, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="to_pandas needs pandas: pip install pandas"):
        both.spex.to_pandas()
    assert len(both.spex.to_records()) == 3


def test_the_progress_bar_is_on_by_default_and_changes_nothing(both):
    shown = spex.evaluate(spex.load_dataset("easy", limit=3), algorithm="rebase", target=4, mode="spex")
    assert [r.tree_digest for r in shown] == [r.tree_digest for r in both.spex]
