"""SPEX's version, as installed (`spex --version`, and in every results file)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["spex_version"]


def spex_version() -> str:
    try:
        return version("spex")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"
