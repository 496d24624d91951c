"""The documentation site's hook (mkdocs.yml's `hooks`) that links the source files the pages name.

A page names a file of the repository in backticks (`shared/hf/llama.py`); the site then carries
that file as a page of its own under `source/` (its text, highlighted, as the clone holds it),
and each such name, outside code blocks and links, becomes a link to it. The build reads the
files from the working tree and fetches nothing, so a site built from any clone links to the
sources of that very clone; a name of a file the clone does not hold stays plain text (and
tests/test_docs_tell_one_story.py fails on it).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

__all__ = ["NAMED", "SOURCE_DIR", "named_paths", "on_files", "on_page_markdown"]

SOURCE_DIR = "source"  # where the site carries the files: source/<path>.md
# A repository path in backticks: a top-level folder of the project, then a file with a suffix.
_FOLDERS = "proto|search|shared|services|bench|cli|api|tests|k8s|compose|examples"
NAMED = re.compile(rf"`((?:{_FOLDERS})/[\w/.-]+\.\w+)`")
_LANGUAGES = {".py": "python", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json", ".sh": "sh"}
_FENCE = re.compile(r"^([ \t]*(?:```|~~~))", re.M)


def named_paths(markdown: str) -> set[str]:
    """The repository paths `markdown` names in backticks (fenced code included)."""
    return set(NAMED.findall(markdown))


def _source_page(path: str, text: str) -> str:
    fence = "`" * max(4, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    language = _LANGUAGES.get(Path(path).suffix, "text")
    return f"# `{path}`\n\n{fence}{language}\n{text}\n{fence}\n"


def on_files(files: Files, config: Any) -> Files:
    """Carry every file a page names, as a page under `source/`."""
    root = Path(config["config_file_path"]).parent
    docs = Path(config["docs_dir"])
    wanted: set[str] = set()
    for file in files.documentation_pages():
        wanted |= named_paths((docs / file.src_uri).read_text(encoding="utf-8"))
    for path in sorted(wanted):
        source = root / path
        if source.is_file():
            page = _source_page(path, source.read_text(encoding="utf-8"))
            files.append(File.generated(config, f"{SOURCE_DIR}/{path}.md", content=page))
    return files


def on_page_markdown(markdown: str, page: Page, config: object, files: Files) -> str:
    """Each named path outside code blocks and links, linked to its page under `source/`."""
    if page.file.src_uri.startswith(f"{SOURCE_DIR}/"):
        return markdown
    here = posixpath.dirname(page.file.src_uri)

    def link(match: re.Match[str]) -> str:
        target = f"{SOURCE_DIR}/{match.group(1)}.md"
        text, start, end = match.string, match.start(), match.end()
        inside_link = text[start - 1 : start] == "[" and text[end : end + 2] == "]("
        if inside_link or files.get_file_from_path(target) is None:
            return match.group(0)
        return f"[{match.group(0)}]({posixpath.relpath(target, here or '.')})"

    parts = _FENCE.split(markdown)
    out, fenced = [], False
    # split() keeps each fence marker: text, marker, text, marker, ... — the text after an odd
    # number of markers is inside a code block.
    for i, part in enumerate(parts):
        if i % 2 == 1:
            fenced = not fenced
            out.append(part)
        else:
            out.append(part if fenced else NAMED.sub(link, part))
    return "".join(out)
