"""Question sets: JSONL files in the MATH-500 format (`problem`, `answer`) or the GSM8K format
(`question`, `answer` ending in `#### <number>`). MATH-500 ships with SPEX (`spex.data`), and
so does `easy`: one- and two-step arithmetic word problems (`spex.data.make_easy`), a set a
small model can be measured on. A row's `level` (MATH-500's 1–5; `easy`'s number of steps)
selects questions."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = [
    "SHIPPED",
    "DatasetQuestion",
    "Fields",
    "load_questions",
    "questions_of",
    "resolve_dataset",
    "row_question",
]

SHIPPED = {"math500": "math500.jsonl", "easy": "easy.jsonl"}  # names usable instead of a path


@dataclass(frozen=True)
class Fields:
    """Which of a row's fields hold its question and its reference answer: the first of each
    list that the row has (MATH-500's `problem`, GSM8K's `question`; both `answer`)."""

    question: tuple[str, ...] = ("problem", "question")
    answer: tuple[str, ...] = ("answer",)


@dataclass(frozen=True)
class DatasetQuestion:
    query_id: str
    text: str
    reference_answer: str


def resolve_dataset(name: str) -> Path:
    """A shipped dataset's name (`math500`) or a path to a JSONL file."""
    if name in SHIPPED:
        return Path(str(resources.files("spex.data").joinpath(SHIPPED[name])))
    path = Path(name)
    if not path.is_file():
        known = ", ".join(SHIPPED)
        raise ValueError(f"dataset {name!r}: no such file (or use a shipped one: {known})")
    return path


def load_questions(
    name: str,
    limit: int | None = None,
    require_answer: bool = True,
    level: int | None = None,
    fields: Fields | None = None,
) -> list[DatasetQuestion]:
    """The first `limit` questions of a dataset (of `level`, if given); ValueError naming the
    line of a bad row. Without `require_answer`, a row may lack its answer (its reference is
    then empty)."""
    path = resolve_dataset(name)
    with path.open() as f:
        return questions_of(_jsonl_rows(f, path), str(path), limit, require_answer, level, fields)


def _jsonl_rows(lines: Iterable[str], path: Path) -> Iterator[tuple[str, object]]:
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield f"line {n}", json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"dataset {path}: line {n} is not JSON") from None


def questions_of(
    rows: Iterable[tuple[str, object]],
    source: str,
    limit: int | None = None,
    require_answer: bool = True,
    level: int | None = None,
    fields: Fields | None = None,
) -> list[DatasetQuestion]:
    """The first `limit` questions of `rows`, each (where it is, the row), of `level` if given,
    numbered in order (`q00000`, ...); ValueError naming `source` and the row for a bad one, or
    when none is left."""
    out: list[DatasetQuestion] = []
    for where, row in rows:
        if limit is not None and len(out) >= limit:
            break
        if level is not None and not (isinstance(row, dict) and row.get("level") == level):
            continue
        out.append(row_question(row, len(out), f"dataset {source}: {where}", require_answer, fields))
    if not out:
        of_level = f" of level {level}" if level is not None else ""
        raise ValueError(f"dataset {source}: no questions{of_level}")
    return out


def row_question(
    row: object,
    index: int,
    where: str,
    require_answer: bool = True,
    fields: Fields | None = None,
) -> DatasetQuestion:
    """A dataset row (a dict) as the question at position `index` (id `q00000`, ...): its text and
    reference are the row's `fields` (a GSM8K answer, `<worked solution> #### <number>`, gives
    the number). ValueError naming `where` for a row that is not an object or lacks them;
    without `require_answer` a row may lack its answer (its reference is then empty)."""
    fields = fields or Fields()
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object")
    text = next((row[k] for k in fields.question if row.get(k)), None)
    answer = next((row[k] for k in fields.answer if row.get(k) is not None), None if require_answer else "")
    if not isinstance(text, str) or not text or not isinstance(answer, str | int | float):
        asked = " (or ".join(repr(k) for k in fields.question) + ")" * (len(fields.question) - 1)
        answer_said = f" and {' or '.join(repr(k) for k in fields.answer)}" if require_answer else ""
        raise ValueError(f"{where}: needs {asked}{answer_said}")
    reference = str(answer)
    if "####" in reference:  # GSM8K: the worked solution, then `#### <number>`
        reference = reference.rsplit("####", 1)[1].strip().replace(",", "")
    return DatasetQuestion(query_id=f"q{index:05d}", text=text, reference_answer=reference)
