"""Datasets load from JSONL in the MATH-500 and GSM8K formats; MATH-500 ships with SPEX."""

import json

import pytest

from spex.shared.content.datasets import load_questions


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_math500_format(tmp_path):
    f = write(tmp_path / "m.jsonl", [{"problem": "What is $1+1$?", "answer": "2", "level": 1}])
    (q,) = load_questions(f)
    assert (q.query_id, q.text, q.reference_answer) == ("q00000", "What is $1+1$?", "2")


def test_gsm8k_format_takes_the_number_after_the_marks(tmp_path):
    rows = [{"question": "Tom has 3 apples...", "answer": "He has 3 + 1,000 = 1,003.\n#### 1,003"}]
    (q,) = load_questions(write(tmp_path / "g.jsonl", rows))
    assert q.reference_answer == "1003"


def test_an_answer_may_be_optional(tmp_path):
    f = write(tmp_path / "q.jsonl", [{"question": "What is 2+2?"}])
    (q,) = load_questions(f, require_answer=False)
    assert (q.text, q.reference_answer) == ("What is 2+2?", "")
    with pytest.raises(ValueError, match="needs"):
        load_questions(f)


def test_the_shipped_math500_loads_by_name():
    questions = load_questions("math500")
    assert len(questions) == 500
    assert questions[0].reference_answer == r"\left( 3, \frac{\pi}{2} \right)"
    assert len(load_questions("math500", limit=3)) == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [("not json\n", "line 1 is not JSON"), ('{"problem": "x"}\n', "line 1: needs"), ("\n", "no questions")],
)
def test_a_bad_file_names_the_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_questions(str(path))


def test_a_missing_file_says_which_names_ship():
    with pytest.raises(ValueError, match="math500"):
        load_questions("no/such/file.jsonl")
