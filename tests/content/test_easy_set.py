"""The shipped easy set: one- and two-step arithmetic word problems in the MATH-500 format,
exactly what its seeded script writes, with answers that follow from the numbers in each
problem; `level` selects questions from it and from MATH-500."""

import json
import re
from importlib import resources

import pytest

from spex.data.make_easy import COUNT, easy_rows
from spex.shared.content.datasets import load_questions
from spex.shared.content.grading import grade


def test_the_shipped_file_is_what_the_script_writes():
    shipped = resources.files("spex.data").joinpath("easy.jsonl").read_text()
    assert shipped == "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in easy_rows())


def test_each_answer_is_the_arithmetic_of_its_solution():
    rows = easy_rows()
    assert len(rows) == COUNT and {r["level"] for r in rows} == {1, 2}
    assert len({r["problem"] for r in rows}) > 0.9 * COUNT  # varied, not one problem repeated
    ops = {"+": int.__add__, "-": int.__sub__, "×": int.__mul__, "÷": int.__floordiv__}
    for row in rows:
        steps = re.findall(r"(\d+) ([-+×÷]) (\d+) = (\d+)", str(row["solution"]))
        assert len(steps) == row["level"]
        known = set(re.findall(r"\d+", str(row["problem"])))  # the numbers the problem gives
        for a, op, b, result in steps:
            assert ops[op](int(a), int(b)) == int(result) and {a, b} <= known
            known.add(result)
        assert steps[-1][3] == row["answer"] and int(row["answer"]) >= 0
        assert grade(f"\\boxed{{{row['answer']}}}", str(row["answer"]))


def test_level_selects_questions():
    assert len(load_questions("easy")) == COUNT
    assert len(load_questions("easy", level=2)) == COUNT // 2
    level_1 = load_questions("math500", level=1)
    assert 0 < len(level_1) < 500 and len(load_questions("math500", limit=5, level=1)) == 5
    with pytest.raises(ValueError, match="no questions of level 9"):
        load_questions("easy", level=9)
