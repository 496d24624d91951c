"""No module of the package is over `MAX_LINES` lines: a longer one holds more than one idea
and is split along its seams."""

import tomllib
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


SERVICES_TOP_MAX = 8  # modules and packages at the top of services/: a service's parts live in its package


def test_services_hold_their_parts_in_packages_each_under_the_independence_contract():
    top = sorted(
        p.stem if p.is_file() else p.name
        for p in (ROOT / "services").iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()
    )
    assert len(top) <= SERVICES_TOP_MAX, f"{len(top)} modules at the top of services/: {top}"
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    independent = next(c["modules"] for c in contracts if c["type"] == "independence")
    # Every module at the top is a service (under the contract) but the demo, which runs the launcher.
    assert sorted(m.removeprefix("spex.services.") for m in independent) == [t for t in top if t != "demo"]
