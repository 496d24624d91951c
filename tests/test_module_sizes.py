"""No module of the package is over `MAX_LINES` lines: a longer one holds more than one idea
and is split along its seams."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "proto", "search", "shared", "services", "bench", "cli", "data", "examples")
MAX_LINES = 400


def test_no_module_is_over_the_line_limit():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                offenders.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not offenders, f"modules over {MAX_LINES} lines:\n" + "\n".join(offenders)
