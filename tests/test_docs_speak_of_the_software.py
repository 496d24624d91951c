"""The guides, concepts and references speak of the software only: no dates, commit hashes,
issue numbers or words about how the project is developed in a reader's path. Dated
measurements live in the results journal — its own section of the site — and each of its pages
starts with what it measured, on which commit, with which command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NAV = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]

# What a page about the software has no business saying.
NOTEBOOK = {
    "an issue number": r"\bissues? \d+",
    "a session": r"\bsessions?\b",
    "the device tool": r"\bdevice tool\b",
    "who is lent a machine": r"\blent an? (GPU|machine)\b",
    "a date": r"\b20\d\d-\d\d-\d\d\b|\(1[0-2]-[0-3]\d\b|\b1[0-2]-[0-3]\d\)",
    "a commit": r"\bcommits? `?[0-9a-f]{7,40}\b|\(`?[0-9a-f]{7}`?\)",
    "the machine it was written on": r"\bthis (machine|CPU)\b",
    "the project's history": r"\bthe project's (earlier|first|engine)\b",
    "where the docs were written": r"\b(tested|measured|checked|downloaded|run|ran) here\b|\bhere \(\d+ cores"
    r"|\b\d+ s here\b|\bbusy with a benchmark\b",
    "what the writers could not read": r"\bnot recovered\b|\bonly as images\b",
    "the software's past": r"\bhas always (been )?written\b|\bfrom before\b|\bnone of this has run\b",
}


def journal() -> list[str]:
    """The pages of the nav's "Results journal" section."""
    section = NAV.split("  - Results journal:\n", 1)[1]
    section = re.split(r"\n  - ", section, maxsplit=1)[0]
    return re.findall(r"([\w/.-]+\.md)", section)


def reader_pages() -> dict[str, str]:
    kept = set(journal())
    found = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    for path in sorted(DOCS.rglob("*.md")):
        name = str(path.relative_to(DOCS))
        if name not in kept and not name.startswith("reference/"):  # reference/: generated from the code
            found[f"docs/{name}"] = path.read_text(encoding="utf-8")
    return found


def test_the_journal_is_a_section_of_its_own():
    pages = journal()
    assert "journal/index.md" in pages and len(pages) >= 10
    assert all((DOCS / page).is_file() for page in pages)
    on_disk = {str(p.relative_to(DOCS)) for p in (DOCS / "journal").glob("*.md")}
    assert on_disk <= set(pages), sorted(on_disk - set(pages))


def test_no_reader_page_speaks_of_how_the_project_is_developed():
    said = [
        (name, what, m.group(0))
        for name, text in reader_pages().items()
        for what, pattern in NOTEBOOK.items()
        for m in re.finditer(pattern, " ".join(text.split()), re.I)
    ]
    assert not said, "\n".join(f"{name}: {what}: {quote!r}" for name, what, quote in said)


def test_the_notebook_words_are_caught():
    """Each pattern catches what it is for (else the test above could pass on anything)."""
    samples = {
        "an issue number": "as issue 40 asked",
        "a session": "waits for a session that is lent a GPU",
        "the device tool": "on the device tool here",
        "who is lent a machine": "a session lent a GPU",
        "a date": "measured (12-03) and on 2026-12-04",
        "a commit": "at commit 47fee29",
        "the machine it was written on": "about 25 s on this CPU",
        "the project's history": "the project's earlier rule",
        "where the docs were written": "a vLLM server here (2 cores; 37 s here)",
        "what the writers could not read": "the per-cell plot was not recovered",
        "the software's past": "as SPEX has always written it",
    }
    for what, pattern in NOTEBOOK.items():
        assert re.search(pattern, samples[what], re.I), what


def test_each_journal_page_starts_with_what_when_and_how():
    pages = [p for p in journal() if p.startswith("journal/") and p != "journal/index.md"]
    pages.append("objectives/README.md")
    for page in pages:
        head = " ".join((DOCS / page).read_text(encoding="utf-8").split("\n\n", 2)[1].split())
        assert head.startswith("*Measured:*"), page
        assert re.search(r"\*Commit:\* `[0-9a-f]{7}`", head), page
        assert "*Command:* `" in head, page
