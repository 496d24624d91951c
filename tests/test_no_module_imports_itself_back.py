"""No import cycle among the package's modules: not at import time, not in a function, not
under `TYPE_CHECKING` (a module that needs a type from its importer has its seam in the wrong
place; the type is a protocol of its own, or the code moves). Read from the sources' imports,
each import edge to the most specific module of the package it names."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The folders that install as the package's subpackages (pyproject.toml's package-dir); api/
# holds the top-level package's own modules.
FOLDERS = {f: f"spex.{f}" for f in ("proto", "search", "shared", "services", "bench", "cli", "data")}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    for path in (ROOT / "api").glob("*.py"):
        out["spex" if path.stem == "__init__" else f"spex.{path.stem}"] = path
    return out


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                names = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            edges[module] |= {t for t in map(resolve, names) if t is not None and t != module}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_back():
    modules = _modules()
    assert "spex.shared.core.machine" in modules and "spex._client" in modules
    cycles = _cycles(_edges(modules))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)
