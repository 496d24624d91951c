"""The schema of a setting: the row a `Settings` field is declared with (`setting(...)`), how its
variable's text becomes a value, and what the rows say to people: the reference table for the
docs, and the help of a command-line flag that sets one setting.

A row is the field's metadata, so the dataclass stays the one declaration of each setting's
name, type and default, and mypy types every field as it is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin, get_type_hints

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Setting", "flag_help", "read_env", "reader", "reference", "row", "setting"]

T = TypeVar("T")


@dataclass(frozen=True)
class Setting:
    """One setting's row beside its field's name, type and default: the variable that sets it,
    what it means, the check a value must pass (given the other settings, for the checks that
    relate two) and the text that says what the check allows ("": the error names nothing)."""

    env: str
    help: str
    check: Callable[[Any, Any], bool] | None = None
    allowed: str = ""


def setting(
    default: T,
    *,
    env: str,
    help: str,
    within: tuple[float, float] | None = None,
    check: Callable[[T, Any], bool] | None = None,
    allowed: str = "",
    secret: bool = False,
) -> T:
    """A `Settings` field and its row. `within=(lo, hi)` is the check `lo <= value <= hi`, and
    says so; `check` is any other, which `allowed` names. A secret is left out of the repr."""
    if within is not None:
        if check is not None or allowed:
            raise TypeError(f"{env}: within, or check and allowed, not both")
        lo, hi = within
        return field(
            default=default,
            repr=not secret,
            metadata={"setting": Setting(env, help, _within(lo, hi), f"{_number(lo)} to {_number(hi)}")},
        )
    return field(default=default, repr=not secret, metadata={"setting": Setting(env, help, check, allowed)})


def row(f: Field[object]) -> Setting:
    """The row a field of `Settings` was declared with."""
    found: Setting = f.metadata["setting"]
    return found


def reader(f: Field[object]) -> Callable[[str], object]:
    """What reads the field's variable: a float, an int, a flag (1 or 0), else the text as is.
    Its `__name__` is what the error calls a value it refuses."""
    return _READERS.get(str(f.type), str)


def read_env(settings: type[DataclassInstance], env: Mapping[str, str]) -> dict[str, object]:
    """The fields `env` sets, each read as its type; ValueError naming the variable of one that
    is not."""
    values: dict[str, object] = {}
    for f in fields(settings):
        name = row(f).env
        if name in env:
            kind = reader(f)
            try:
                values[f.name] = kind(env[name])
            except ValueError:
                raise ValueError(f"{name}: {env[name]!r} is not a {kind.__name__}") from None
    return values


def reference(settings: type[DataclassInstance]) -> str:
    """The settings reference as a Markdown table: variable, type, default, allowed, meaning,
    one row per setting in declaration order."""
    hints = get_type_hints(settings)
    lines = ["| Variable | Type | Default | Allowed | Meaning |", "|---|---|---|---|---|"]
    for f in fields(settings):
        r = row(f)
        kind = hints[f.name]
        shown = (
            " or ".join(a or "(empty)" for a in get_args(kind))
            if get_origin(kind) is Literal
            else reader(f).__name__
        )
        default = f"`{_shown(f.default)}`" if f.default != "" else "(empty)"
        cells = [f"`{r.env}`", shown, default, r.allowed, r.help]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def flag_help(
    settings: type[DataclassInstance], name: str, *, variable: bool = True, meaning: str = ""
) -> str:
    """The argparse help of a command-line flag that sets the field `name`: the setting's meaning
    (or `meaning`, for a flag that means more than the setting does) and, for a flag whose absence
    leaves the setting to its variable, where its default comes from. A flag with a default of its
    own (`variable=False`) says the meaning alone."""
    f = next(f for f in fields(settings) if f.name == name)
    r = row(f)
    text = meaning or r.help
    if variable:
        text += f" (default: ${r.env}, else {_shown(f.default) if f.default != '' else 'empty'})"
    return text.replace("%", "%%")


def _within(lo: float, hi: float) -> Callable[[float, object], bool]:
    return lambda value, _: lo <= value <= hi


def _number(n: float) -> str:
    """`n` as the allowed texts write it: 4096, 10,000, 0.01."""
    return f"{n:,}" if abs(n) >= 10_000 else str(n)


def _shown(value: object) -> str:
    """A default as its variable would be written (a flag as 1 or 0)."""
    return str(int(value)) if isinstance(value, bool) else str(value)


def _flag(raw: str) -> bool:
    """A boolean variable: 1/true/yes or 0/false/no."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no", ""):
        return False
    raise ValueError(raw)


_flag.__name__ = "flag (1 or 0)"

# A field's reader by its annotation (`from __future__ import annotations` keeps it a string).
_READERS: dict[str, Callable[[str], object]] = {"float": float, "int": int, "bool": _flag}
