"""A member a protocol declares is called, never probed: no `getattr(x, "prepare", ...)` or
`hasattr(x, "close")` on the service runner's hooks, a live engine's clock scale or the bench
engines' text interface anywhere in the packages (they are declared by `Service`, `LiveEngine`
and `Engine`, and every implementation has them)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "proto", "search", "shared", "services", "bench", "cli")
DECLARED = {"prepare", "summary", "retry_once", "time_scale", "template", "count_tokens", "close"}


def _probes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each getattr/hasattr of a declared member by its literal name."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in DECLARED
        ):
            found.append((node.lineno, node.args[1].value))
    return found


def test_the_scan_finds_a_probe():
    assert _probes(ast.parse('getattr(engine, "time_scale", 1.0)\nhasattr(x, "close")')) == [
        (1, "time_scale"),
        (2, "close"),
    ]


def test_no_package_probes_a_declared_member():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, name in _probes(ast.parse(path.read_text(encoding="utf-8"))):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: probes {name!r}")
    assert not offenders, "\n".join(offenders)
