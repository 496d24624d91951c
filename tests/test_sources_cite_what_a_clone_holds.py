"""Comments and docstrings cite what a clone holds: no path outside the repository (the
design notes beside it) and no section of a document it does not ship."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ("../shared/", "DESIGN §", "DESIGN.md")
PACKAGES = ("api", "proto", "search", "shared", "services", "bench", "cli", "data", "examples", "tests")


def test_no_source_cites_a_document_outside_the_repository():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if any(mark in line for mark in OUTSIDE):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
