"""A Redis reply's bytes as text: the one conversion every reader of a reply uses (a client made
with `decode_responses` gives text already). Pure: no I/O, so the contract's names use it too."""

from __future__ import annotations

__all__ = ["as_str"]


def as_str(value: bytes | str) -> str:
    """`value` as text: bytes decoded as UTF-8, text as it is."""
    return value.decode() if isinstance(value, bytes) else value
