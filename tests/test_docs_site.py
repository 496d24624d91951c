"""The documentation site builds with `mkdocs build --strict`: a broken link or anchor, or a page
under docs/ that the nav leaves out, fails the build (mkdocs.yml's `validation`); the Python
API's reference is rendered from the docstrings in that build, and the source files the pages
name are carried and linked (cli/docs_sources.py)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import spex
from spex.cli.docs_python import SOURCES

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_site_builds_strict_with_every_page_in_the_nav(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2.0
    shutil.rmtree(ROOT / SOURCES, ignore_errors=True)  # as a fresh clone has it: the build lays it out
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for page in ("index.html", "journal/index.html", "reference/index.html", "reference/cli/index.html"):
        assert (site / page).is_file(), page
    # A source path a page names links to the file as the clone holds it, carried by the site.
    assert 'href="../source/shared/hf/llama.py/"' in (site / "gpu/index.html").read_text()
    carried = (site / "source/shared/hf/llama.py/index.html").read_text()
    assert "ARCHITECTURES" in carried and "LlamaRunner" in carried
    python = (site / "reference/python/index.html").read_text()
    for docstring in (spex.evaluate.__doc__, spex.Client.__doc__, spex.QuestionResult.__doc__):
        assert docstring is not None and docstring.splitlines()[0].split("`")[0] in python
