"""The questions an offline evaluation runs: `load_dataset` reads them from a list, a JSONL file,
a shipped set, or a Hugging Face `datasets` split already on disk, into a `Dataset`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias, overload

from spex.shared.content.datasets import (
    SHIPPED,
    DatasetQuestion,
    Fields,
    load_questions,
    questions_of,
)

__all__ = ["Dataset", "DatasetLike", "Question", "load_dataset"]

# A `datasets` folder written by `save_to_disk`: a split's, or a dictionary of splits'.
_SPLIT_FILE, _SPLITS_FILE = "state.json", "dataset_dict.json"


@dataclass(frozen=True)
class Question:
    """One question of a dataset.

    Attributes:
        query_id: Its id, `q00000` for the first question of the dataset, `q00001` for the
            next, and so on (after `level` picked the rows). With the run's seed it is what
            every random choice of its search derives from: the same id and seed give the same
            tree in `spex.evaluate`, `spex bench --dataset` and the pipeline.
        text: The question.
        reference: The reference answer its answer is graded against; `None` for a question
            without one (it is then not graded).
    """

    query_id: str
    text: str
    reference: str | None = None


class Dataset(Sequence[Question]):
    """Questions in order: what `spex.evaluate` runs. Indexing gives a `Question`, slicing a
    `Dataset` of the same questions (their ids unchanged, so a question searches the same tree
    in any slice). Build one with `load_dataset`."""

    def __init__(self, questions: Iterable[Question], source: str = "questions") -> None:
        self._questions = tuple(questions)
        self.source = source  # where the questions came from (a path, a shipped name, "questions")
        seen: set[str] = set()
        for q in self._questions:
            if q.query_id in seen:
                raise ValueError(f"dataset {source}: the id {q.query_id!r} is given to two questions")
            seen.add(q.query_id)

    @overload
    def __getitem__(self, index: int) -> Question: ...

    @overload
    def __getitem__(self, index: slice) -> Dataset: ...

    def __getitem__(self, index: int | slice) -> Question | Dataset:
        if isinstance(index, slice):
            return Dataset(self._questions[index], self.source)
        return self._questions[index]

    def __len__(self) -> int:
        return len(self._questions)

    def __iter__(self) -> Iterator[Question]:
        return iter(self._questions)

    def __repr__(self) -> str:
        return f"Dataset({len(self)} questions from {self.source})"


# A `datasets.Dataset` is an iterable of mappings (its rows), a `DatasetDict` a mapping of them.
DatasetLike: TypeAlias = Dataset | str | os.PathLike[str] | Iterable[str | Mapping[str, object] | Question]
"""What `load_dataset` and `spex.evaluate` take as a dataset (see `load_dataset`)."""


def load_dataset(
    source: DatasetLike,
    *,
    split: str | None = None,
    level: int | None = None,
    limit: int | None = None,
    question_field: str | None = None,
    answer_field: str | None = None,
) -> Dataset:
    """Read questions into a `Dataset`.

    Args:
        source: Where the questions are:

            - a shipped set's name: `"easy"` (100 one- and two-step arithmetic word problems) or
              `"math500"` (MATH-500);
            - a path to a JSONL file, one JSON object a line;
            - a path to a folder a Hugging Face `datasets` split (or a dictionary of splits)
              was saved to with `save_to_disk` (read with `datasets.load_from_disk`, nothing
              downloaded);
            - a `datasets.Dataset` (or `DatasetDict`) already loaded;
            - a list of questions: strings (ungraded), dicts (rows, as in a JSONL file), or
              `Question`s (kept as they are, ids included);
            - a `Dataset` (returned as is, `limit` applied).
        split: Which split of a dictionary of splits (needed where it holds more than one).
        level: Only the rows whose `level` field equals this (MATH-500's 1–5; `easy`'s number
            of steps).
        limit: At most this many questions (the first ones).
        question_field: The field holding a row's question. Default: `problem`, else
            `question` (MATH-500's and GSM8K's).
        answer_field: The field holding a row's reference answer. Default: `answer`; a GSM8K
            answer (a worked solution ending `#### <number>`) gives the number. A row without
            it is not graded.

    Returns:
        The questions, numbered `q00000`, `q00001`, ... in order (after `level`).

    Raises:
        ValueError: One line naming the source and the row: no such file or shipped set, a
            line that is not JSON, a row without its question, no questions left, a folder
            that is not a saved dataset, or a dictionary of splits without `split`.
    """
    if isinstance(source, Dataset):
        return source if limit is None else source[:limit]
    fields = Fields(
        (question_field,) if question_field else Fields.question,
        (answer_field,) if answer_field else Fields.answer,
    )
    if isinstance(source, str | os.PathLike):
        return _from_path(str(source), split, level, limit, fields)
    if _is_hf(source):
        rows = _hf_split(source, split, "a datasets object")
        return _from_rows(enumerate(rows), "a datasets object", level, limit, fields)
    if isinstance(source, Iterable):
        items = list(source)
        given = [q for q in items if isinstance(q, Question)]
        if items and len(given) == len(items):
            return Dataset(given[:limit] if limit is not None else given)
        listed: list[object] = [{fields.question[0]: q} if isinstance(q, str) else q for q in items]
        return _from_rows(enumerate(listed), "questions", level, limit, fields)
    raise ValueError(f"dataset: {type(source).__name__} is not a dataset (see spex.load_dataset)")


def _from_path(path: str, split: str | None, level: int | None, limit: int | None, fields: Fields) -> Dataset:
    if Path(path).is_dir():
        return _from_rows(
            enumerate(_hf_split(_load_from_disk(path), split, path)), path, level, limit, fields
        )
    if path not in SHIPPED and not Path(path).is_file():
        known = ", ".join(SHIPPED)
        raise ValueError(f"dataset {path!r}: no such file or folder (or a shipped set: {known})")
    loaded = load_questions(path, limit, require_answer=False, level=level, fields=fields)
    return Dataset((_question(q) for q in loaded), path)


def _from_rows(
    rows: Iterable[tuple[int, object]], source: str, level: int | None, limit: int | None, fields: Fields
) -> Dataset:
    numbered = ((f"row {i}", _plain(row)) for i, row in rows)
    loaded = questions_of(numbered, source, limit, require_answer=False, level=level, fields=fields)
    return Dataset((_question(q) for q in loaded), source)


def _question(q: DatasetQuestion) -> Question:
    return Question(q.query_id, q.text, q.reference_answer or None)


def _plain(row: object) -> object:
    """A row as a dict (a `datasets` row is one already; any other mapping is copied)."""
    return dict(row) if isinstance(row, Mapping) else row


def _is_hf(source: object) -> bool:
    """A `datasets.Dataset` or `DatasetDict`, known by its module without importing `datasets`
    (a heavy import, and an optional one)."""
    return type(source).__module__.split(".")[0] == "datasets"


def _hf_split(data: Any, split: str | None, source: str) -> Iterable[Mapping[str, object]]:
    """The rows of a `datasets.Dataset`, or of the `split` of a `DatasetDict`."""
    if not hasattr(data, "keys"):  # a Dataset: its rows
        if split is not None:
            raise ValueError(f"dataset {source}: holds one split; split={split!r} names none of it")
        return data  # type: ignore[no-any-return]
    names = sorted(data.keys())
    if split is None and len(names) == 1:
        split = names[0]
    if split not in names:
        said = "name one with split=" if split is None else f"no split {split!r}"
        raise ValueError(f"dataset {source}: {said} (it has {', '.join(names)})")
    return data[split]  # type: ignore[no-any-return]


def _load_from_disk(path: str) -> Any:
    """A split or a dictionary of splits saved with `save_to_disk` (read from disk, never
    downloaded)."""
    if not (Path(path, _SPLIT_FILE).is_file() or Path(path, _SPLITS_FILE).is_file()):
        raise ValueError(
            f"dataset {path!r}: a folder, but not one `datasets` saved with save_to_disk "
            f"(no {_SPLIT_FILE} or {_SPLITS_FILE})"
        )
    try:
        import datasets
    except ImportError:
        raise ValueError(
            f"dataset {path!r}: a saved `datasets` folder needs the datasets package (pip install datasets)"
        ) from None
    try:
        return datasets.load_from_disk(path)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"dataset {path!r}: datasets could not read it: {exc}") from None
