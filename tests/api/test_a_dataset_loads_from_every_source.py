"""`spex.load_dataset` reads a list, a JSONL file (MATH-500's fields, GSM8K's, or fields named),
a shipped set, and a Hugging Face `datasets` split saved to disk (or loaded): the same questions
with the same ids whatever the source, a row without an answer ungraded, and every mistake one
line naming the source and the row."""

import json

import datasets
import pytest

import spex

ROWS = [
    {"problem": "What is 2 + 3?", "answer": "5", "level": 1},
    {"problem": "What is 4 * 6?", "answer": 24, "level": 2},
    {"problem": "Name a prime.", "level": 1},
]


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def plain(data):
    return [(q.query_id, q.text, q.reference) for q in data]


EXPECTED = [
    ("q00000", "What is 2 + 3?", "5"),
    ("q00001", "What is 4 * 6?", "24"),
    ("q00002", "Name a prime.", None),
]


def test_the_same_rows_give_the_same_questions_from_every_source(tmp_path):
    split = datasets.Dataset.from_list(
        [{"problem": r["problem"], "answer": str(r.get("answer", ""))} for r in ROWS]
    )
    split.save_to_disk(str(tmp_path / "split"))
    datasets.DatasetDict({"test": split}).save_to_disk(str(tmp_path / "dict"))
    sources = {
        "list": ROWS,
        "file": str(jsonl(tmp_path / "q.jsonl", ROWS)),
        "path": jsonl(tmp_path / "p.jsonl", ROWS),
        "saved split": str(tmp_path / "split"),
        "saved dict": str(tmp_path / "dict"),
        "object": split,
    }
    for name, source in sources.items():
        assert plain(spex.load_dataset(source)) == EXPECTED, name
    assert plain(spex.load_dataset(sources["file"], level=1)) == [
        EXPECTED[0],
        ("q00001", "Name a prime.", None),
    ]
    assert plain(spex.load_dataset(sources["file"], limit=2)) == EXPECTED[:2]
    assert plain(spex.load_dataset(["What is 1 + 1?"])) == [("q00000", "What is 1 + 1?", None)]


def test_fields_are_named_and_gsm8k_answers_give_their_number(tmp_path):
    gsm = [{"question": "Sam has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"}]
    assert plain(spex.load_dataset(gsm)) == [("q00000", "Sam has 3 apples and buys 4. How many?", "7")]
    own = [{"prompt": "What is 9 - 2?", "gold": "7", "problem": "not this"}]
    loaded = spex.load_dataset(own, question_field="prompt", answer_field="gold")
    assert plain(loaded) == [("q00000", "What is 9 - 2?", "7")]
    easy = spex.load_dataset("easy", level=2, limit=3)
    assert len(easy) == 3 and easy.source == "easy" and all(q.reference for q in easy)


def test_a_dataset_keeps_its_ids_when_sliced_and_refuses_a_repeated_one():
    data = spex.load_dataset("math500", limit=10)
    assert [q.query_id for q in data[3:5]] == ["q00003", "q00004"] and isinstance(data[3:5], spex.Dataset)
    assert spex.load_dataset(data, limit=2)[1] is data[1]
    with pytest.raises(ValueError, match="the id 'q1' is given to two questions"):
        spex.Dataset([spex.Question("q1", "a"), spex.Question("q1", "b")])


def test_a_saved_dictionary_of_splits_needs_its_split_named(tmp_path):
    rows = [{"problem": "What is 1 + 1?", "answer": "2"}]
    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows * 2), "test": datasets.Dataset.from_list(rows)}
    )
    splits.save_to_disk(str(tmp_path / "d"))
    assert len(spex.load_dataset(str(tmp_path / "d"), split="train")) == 2
    with pytest.raises(ValueError, match="name one with split= \\(it has test, train\\)"):
        spex.load_dataset(str(tmp_path / "d"))
    with pytest.raises(ValueError, match="no split 'dev'"):
        spex.load_dataset(splits, split="dev")


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("no-such-file.jsonl", "no such file or folder (or a shipped set: math500, easy)"),
        ([{"text": "x"}], "row 0: needs 'problem' (or 'question')$"),
        ([], "no questions"),
        (42, "int is not a dataset"),
    ],
)
def test_a_bad_source_is_one_line(source, said):
    with pytest.raises(ValueError, match=said.replace("(", "\\(").replace(")", "\\)")) as caught:
        spex.load_dataset(source)
    assert "\n" not in str(caught.value)


def test_a_bad_file_or_folder_names_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "ok", "answer": "1"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        spex.load_dataset(str(bad))
    (tmp_path / "folder").mkdir()
    with pytest.raises(ValueError, match="not one `datasets` saved with save_to_disk"):
        spex.load_dataset(str(tmp_path / "folder"))
