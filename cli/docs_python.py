"""The documentation site's hook (mkdocs.yml's `hooks`) that lets mkdocstrings read the Python
API from its source: the package `spex` as the wheel lays it out, a tree of links under
`build/docs-sources/spex/` made from pyproject.toml's package-dir at the start of every build.

Why: the top-level package's own modules live in api/ and its subpackages in proto/, shared/,
..., which an installed `spex` maps (setuptools' editable finder) but griffe, reading source
files by their folders' names, cannot. mkdocs.yml's handler reads from the tree
(`paths: [build/docs-sources]`); nothing is imported or fetched.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

__all__ = ["SOURCES", "link_tree", "on_config"]

SOURCES = Path("build/docs-sources")  # under the folder of mkdocs.yml and pyproject.toml


def link_tree(root: Path, out: Path) -> Path:
    """`out/spex/` laid out as the wheel installs `spex`, each entry a link into `root`'s folders
    (pyproject.toml's package-dir); returns `out`."""
    mapping: dict[str, str] = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    package = out / "spex"
    shutil.rmtree(out, ignore_errors=True)
    package.mkdir(parents=True)
    for name, folder in mapping.items():
        source = (root / folder).resolve()
        if name == "spex":  # the top-level package's own modules, one link each
            for entry in sorted(source.glob("*.py")):
                (package / entry.name).symlink_to(entry)
        else:
            (package / name.removeprefix("spex.").replace(".", "/")).symlink_to(
                source, target_is_directory=True
            )
    return out


@event_priority(100)
def on_config(config: Any) -> Any:
    """mkdocs' hook: the tree beside mkdocs.yml, laid out before any plugin reads its config (the
    Python handler keeps only the `paths` that exist when it is set up)."""
    link_tree(Path(config.config_file_path).parent, Path(config.config_file_path).parent / SOURCES)
    return config
