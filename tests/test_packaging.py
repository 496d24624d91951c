"""The wheel installs one top-level package, `spex`, holding every module of the folders it
maps (its own, the public Python API, from api/) and the shipped dataset, and carries the
licence (LICENSE, Apache-2.0); installed from the wheel alone, `import spex` is the API."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "api": "spex",
    "proto": "spex/proto",
    "search": "spex/search",
    "shared": "spex/shared",
    "services": "spex/services",
    "bench": "spex/bench",
    "cli": "spex/cli",
    "data": "spex/data",
}


def test_the_wheel_has_one_top_level_package_with_every_module(tmp_path):
    # Build from a clean copy: setuptools reuses a source tree's build/ folder, whose stale
    # files would hide a package missing from pyproject.toml.
    src = tmp_path / "src"
    junk = (".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", "results", "docs", "tests")
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*junk))
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(
        [*build, "-w", str(tmp_path), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("spex-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"spex"}
    modules = {name for name in names if name.endswith(".py")}
    expected = {
        f"{package}/{path.relative_to(ROOT / folder).as_posix()}"
        for folder, package in FOLDERS.items()
        for path in (ROOT / folder).rglob("*.py")
    }
    assert "spex/__init__.py" in expected  # a real package, not a namespace
    assert expected - modules == set(), "modules missing from the wheel (pyproject.toml's packages list)"
    assert modules - expected == set()
    assert "spex/data/math500.jsonl" in names  # the shipped dataset
    kernels = {"spex/shared/hf/attention.c", "spex/shared/hf/linear.c", "spex/shared/hf/bf16.h"}
    assert kernels <= set(names)  # built on first use
    (info,) = {name.split("/")[0] for name in names if name.split("/")[0].endswith(".dist-info")}
    assert any(n.startswith(f"{info}/") and n.endswith("LICENSE") for n in names)  # the Apache-2.0 text
    assert "Apache-2.0" in zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    # The wheel's own files, ahead of the editable install: `import spex` is the API and its
    # subpackages are the wheel's, and an evaluation runs from them.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import spex; r = spex.evaluate(questions=2, target=2, progress=False); "
        "import spex.bench; print(spex.__file__, spex.bench.__file__, len(r))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    api, bench, count = done.stdout.split()
    assert api == str(site / "spex" / "__init__.py") and bench == str(site / "spex" / "bench" / "__init__.py")
    assert count == "2"
