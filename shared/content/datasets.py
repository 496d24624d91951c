"""Question sets: JSONL files in the MATH-500 format (`problem`, `answer`) or the GSM8K format
(`question`, `answer` ending in `#### <number>`). MATH-500 ships with SPEX (`spex.data`), and
so does `easy`: one- and two-step arithmetic word problems (`spex.data.make_easy`), a set a
small model can be measured on. A row's `level` (MATH-500's 1–5; `easy`'s number of steps)
selects questions."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["SHIPPED", "DatasetQuestion", "load_questions", "resolve_dataset"]

SHIPPED = {"math500": "math500.jsonl", "easy": "easy.jsonl"}  # names usable instead of a path


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
    name: str, limit: int | None = None, require_answer: bool = True, level: int | None = None
) -> list[DatasetQuestion]:
    """The first `limit` questions of a dataset (of `level`, if given); ValueError naming the
    line of a bad row. Without `require_answer`, a row may lack its answer (its reference is
    then empty)."""
    path = resolve_dataset(name)
    out: list[DatasetQuestion] = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"dataset {path}: line {n} is not JSON") from None
            if level is not None and not (isinstance(row, dict) and row.get("level") == level):
                continue
            out.append(_question(row, len(out), f"dataset {path}: line {n}", require_answer))
    if not out:
        of_level = f" of level {level}" if level is not None else ""
        raise ValueError(f"dataset {path}: no questions{of_level}")
    return out


def _question(row: object, index: int, where: str, require_answer: bool) -> DatasetQuestion:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object")
    text = row.get("problem") or row.get("question")
    answer = row.get("answer", None if require_answer else "")
    if not isinstance(text, str) or not text or not isinstance(answer, str | int | float):
        raise ValueError(f"{where}: needs 'problem' (or 'question') and 'answer'")
    reference = str(answer)
    if "####" in reference:  # GSM8K: the worked solution, then `#### <number>`
        reference = reference.rsplit("####", 1)[1].strip().replace(",", "")
    return DatasetQuestion(query_id=f"q{index:05d}", text=text, reference_answer=reference)
