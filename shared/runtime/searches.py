"""The searches a process serves: the built-ins and the plug-ins it loads, and what the ingress
and the coordinator check a question's search against.

A plug-in is a search class written against `spex.search`, found two ways:

- an *entry point* of the group `spex.searches` in an installed distribution, whose name is
  the search's and whose object is its class (`greedy = "mypkg.searches:Greedy"`);
- a module named in `SPEX_SEARCH_PLUGINS` (`module[,module…]`, importable from the Python
  path), which registers its searches with `spex.search.register` as it is imported.

Every service loads them as it builds its settings (the setting's check is `load_searches`),
and `spex` before it reads its arguments, so every process of a deployment with the same
environment knows the same searches. A plug-in that fails to load stops the process with one
line naming it: a service that silently lacked a search would refuse its questions later.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from spex.proto.submission import SearchCheck
from spex.shared.core.search import SEARCHES, SearchAlgorithm, SearchConfig, make_algorithm
from spex.shared.core.search.base import ParamValue, parameter_defaults, register
from spex.shared.core.tree import Tree

__all__ = [
    "ENTRY_POINT_GROUP",
    "SearchEntry",
    "catalogue",
    "check_search",
    "load_searches",
    "search_checks",
]

ENTRY_POINT_GROUP = "spex.searches"
BUILT_IN = "built-in"
_origins: dict[str, str] = {}  # a plug-in's name -> where it came from
_scanned: tuple[str, ...] | None = None  # the Python path the entry points were last read on
_imported: set[str] = set()  # modules SPEX_SEARCH_PLUGINS named, already imported


@dataclass(frozen=True)
class SearchEntry:
    """A search as `spex searches` and `/v1/models` list it."""

    name: str
    family: str
    default_selection: str
    parameters: dict[str, ParamValue]  # name -> default
    origin: str  # built-in, `entry point <dist>` or `SPEX_SEARCH_PLUGINS <module>`
    summary: str  # the first line of its docstring (of its module's, when it has none)


def load_searches(modules: str = "") -> None:
    """Register the searches of every installed `spex.searches` entry point (read again when
    the Python path changed) and of each module in `modules` (comma-separated). A plug-in
    that cannot be loaded raises ValueError naming it and why."""
    global _scanned
    if _scanned != tuple(sys.path):
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            _load_entry_point(ep)
        _scanned = tuple(sys.path)
    for module in (m.strip() for m in modules.split(",")):
        if module and module not in _imported:
            before = set(SEARCHES)
            try:
                importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 (any failure of the user's module, said in one line)
                raise ValueError(f"SPEX_SEARCH_PLUGINS: cannot import {module!r}: {_reason(exc)}") from None
            added = set(SEARCHES) - before
            if not added:
                raise ValueError(f"SPEX_SEARCH_PLUGINS: {module!r} registers no search ")
            _imported.add(module)
            for name in added:
                _origins[name] = f"SPEX_SEARCH_PLUGINS {module}"


def _load_entry_point(ep: EntryPoint) -> None:
    where = f"entry point {ep.name} = {ep.value}"
    if ep.name in _origins or (ep.name in SEARCHES and SEARCHES[ep.name].__module__ == ep.module):
        return
    try:
        cls = ep.load()
    except Exception as exc:  # noqa: BLE001 (any failure of the user's module, said in one line)
        raise ValueError(f"{ENTRY_POINT_GROUP}: cannot load {where}: {_reason(exc)}") from None
    if not (isinstance(cls, type) and issubclass(cls, SearchAlgorithm)):
        raise ValueError(f"{ENTRY_POINT_GROUP}: {where} is not a spex.search.SearchAlgorithm class")
    if getattr(cls, "name", None) != ep.name:
        raise ValueError(f"{ENTRY_POINT_GROUP}: {where} names the search {getattr(cls, 'name', None)!r}")
    try:
        register(cls)
    except ValueError as exc:
        raise ValueError(f"{ENTRY_POINT_GROUP}: {where}: {exc}") from None
    dist = ep.dist.name if ep.dist is not None else "?"
    _origins[ep.name] = f"entry point {dist}"


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def origin(name: str) -> str:
    """Where search `name` came from."""
    if name in _origins:
        return _origins[name]
    module = SEARCHES[name].__module__
    return BUILT_IN if module.startswith("spex.shared.core.search.") else f"registered by {module}"


def catalogue() -> list[SearchEntry]:
    """Every registered search, by name."""
    out = []
    for name in sorted(SEARCHES):
        cls = SEARCHES[name]
        doc = cls.__doc__ or sys.modules[cls.__module__].__doc__ or ""
        out.append(
            SearchEntry(
                name,
                cls.family,
                cls.default_selection,
                parameter_defaults(cls),
                origin(name),
                _first_sentence(doc),
            )
        )
    return out


def _first_sentence(doc: str) -> str:
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def check_search(algorithm: str, target: int, params: Mapping[str, ParamValue]) -> None:
    """ValueError unless search `algorithm` takes `target` and `params` (it is built once, on
    a tree of its own, which checks both as a question's search would be)."""
    config = SearchConfig(algorithm, target, params=dict(params))
    try:
        make_algorithm(Tree("check", 0, 1), config)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 (a plug-in's own failure on what it was given)
        raise ValueError(f"the search refused its parameters: {_reason(exc)}") from None


def search_checks() -> dict[str, SearchCheck]:
    """The check of each registered search (`Limits.searches`)."""
    return {name: _checker(name) for name in SEARCHES}


def _checker(name: str) -> SearchCheck:
    def check(target: int, params: Mapping[str, float | str]) -> None:
        check_search(name, target, params)

    return check
