"""The wire contract's reference page, read off `spex.proto`: every stream, key and consumer
group of `names` (and what `STREAMS` and `KEYS` say each carries), every message struct of
`messages` with its fields' types and defaults (`msgspec.structs.fields`), and the value sets.

What a name or a field means is the comment it is declared with (on its line, the lines just
above it, or the lines just below that continue it): the source is the one place it is
written, so the page reads it from there.
"""

from __future__ import annotations

import ast
import inspect
import io
import tokenize
import types
from collections import defaultdict
from typing import Any, Literal, Union, get_args, get_origin

import msgspec

from spex.proto import messages, names
from spex.proto.names import KEYS, STREAMS, Family

__all__ = ["cell", "comments", "prose", "wire_page"]

SEPARATOR = "# ---"  # a section's rule in names.py: `# ---- streams`


def prose(markdown: str) -> str:
    """`markdown` with its angle brackets outside code spans escaped: `<id>` is no HTML tag."""
    parts = markdown.split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def cell(text: str) -> str:
    """`text` as one Markdown table cell: one line, its pipes and angle brackets escaped."""
    return prose(" ".join(text.split())).replace("|", "\\|")


def _doc(obj: Any) -> str:
    """An object's own docstring (not one it inherits), cleaned, as Markdown."""
    own = obj.__dict__.get("__doc__") if isinstance(obj, type) else obj.__doc__
    return prose(inspect.cleandoc(own)) if own else ""


def comments(module: types.ModuleType) -> dict[str, str]:
    """What each declaration of `module` says of itself in comments, by name (`NAME` at the top,
    `Class.field` in a class): the comment on its lines, the comment lines just above it, and
    comment lines just below it that no declaration follows (they continue its own)."""
    source = inspect.getsource(module)
    notes: dict[int, str] = {}  # line -> its comment
    code: set[int] = set()  # lines with code on them
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and not token.string.startswith(SEPARATOR):
            notes[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code.update(range(token.start[0], token.end[0] + 1))
    alone = set(notes) - code  # comment-only lines

    def block(line: int, step: int) -> list[int]:
        lines = []
        while line + step in alone:
            line += step
            lines.append(line)
        return lines

    out: dict[str, str] = {}
    for name, node in _declarations(ast.parse(source)):
        end = node.end_lineno or node.lineno
        above = sorted(block(node.lineno, -1))
        below = block(end, 1)
        if below and below[-1] + 1 in code:  # the comment above the next declaration
            below = []
        lines = above + [n for n in range(node.lineno, end + 1) if n in notes] + below
        if lines:
            out[name] = " ".join(notes[n] for n in lines)
    return out


def _declarations(tree: ast.Module) -> list[tuple[str, ast.stmt]]:
    found: list[tuple[str, ast.stmt]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.append((node.targets[0].id, node))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append((node.target.id, node))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found.append((f"{node.name}.{item.target.id}", item))
    return found


def _value_sets() -> list[tuple[str, tuple[Any, ...], str]]:
    """(alias, values, the tuple that holds them or "") of each value set of `messages`."""
    public = [(n, getattr(messages, n)) for n in messages.__all__]
    tuples = {value: n for n, value in public if isinstance(value, tuple)}
    return [(n, get_args(v), tuples.get(get_args(v), "")) for n, v in public if get_origin(v) is Literal]


def _type(kind: Any, aliases: dict[tuple[Any, ...], str]) -> str:
    """A field's type as the page writes it: a value set or a struct by name, linked."""
    origin, args = get_origin(kind), get_args(kind)
    if origin is Literal:
        return f"[{aliases[args]}](#value-sets)" if args in aliases else " or ".join(map(repr, args))
    if origin in (Union, types.UnionType):
        return " or ".join(_type(a, aliases) for a in args)
    if origin is list:
        return f"list of {_type(args[0], aliases)}"
    if kind is type(None):
        return "None"
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return f"[{kind.__name__}](#{kind.__name__.lower()})"
    return str(getattr(kind, "__name__", kind))


def _json(value: Any) -> str:
    """A value as the wire's JSON would write it (MessagePack's maps and arrays read alike)."""
    return f"`{msgspec.json.encode(value).decode()}`"


def _default(field: msgspec.structs.FieldInfo) -> str:
    if field.default_factory is not msgspec.NODEFAULT:
        return _json(field.default_factory())
    return "required" if field.default is msgspec.NODEFAULT else _json(field.default)


def _name(name: str | Family) -> str:
    return name.pattern if isinstance(name, Family) else name


def _carriers() -> dict[str, list[str]]:
    """Message type -> the streams and keys that carry it."""
    out: dict[str, list[str]] = defaultdict(list)
    for table in (STREAMS, KEYS):
        for name, kinds in table.items():
            for kind in kinds:
                out[kind.__name__].append(f"`{_name(name)}`")
    return out


def _names_section() -> list[str]:
    """A table per section of names.py (`# ---- streams`, groups, keys), in declaration order."""
    said, source = comments(names), inspect.getsource(names)
    rules = [(n, line.rstrip("-# ").split()[-1]) for n, line in enumerate(source.splitlines(), 1)
             if line.startswith(SEPARATOR)]  # fmt: skip
    carried = {_name(n): kinds for table in (STREAMS, KEYS) for n, kinds in table.items()}
    rows: dict[str, list[str]] = defaultdict(list)
    for attr, node in _declarations(ast.parse(source)):
        value = getattr(names, attr, None)
        if attr not in names.__all__ or not isinstance(value, (str, Family)):
            continue
        kinds = carried.get(_name(value), ())
        where = max(((n, rule) for n, rule in rules if n < node.lineno), default=(0, ""))[1]
        if where == "streams" and not (kinds or isinstance(value, Family)):
            where = "other"  # a constant beside the streams (a pool's name), not a stream
        carries = ", ".join(f"[{k.__name__}](#{k.__name__.lower()})" for k in kinds)
        rows[where].append(f"| `{attr}` | `{_name(value)}` | {carries} | {cell(said.get(attr, ''))} |")
    lines = []
    titles = {"streams": "Streams", "groups": "Consumer groups", "keys": "Keys", "other": "Other names"}
    for where in sorted(rows, key=lambda w: list(titles).index(w) if w in titles else len(titles)):
        title = titles.get(where, where.capitalize() or "Names")
        lines += [f"### {title}", "", "| Python | Redis name | Carries | Meaning |", "|---|---|---|---|"]
        lines += [*rows[where], ""]
    return lines


def _structs_section() -> list[str]:
    said = comments(messages)
    aliases = {args: alias for alias, args, _ in _value_sets()}
    envelope = {f.name for f in msgspec.structs.fields(messages.Message)}
    carriers = _carriers()
    lines = []
    structs = [getattr(messages, n) for n in messages.__all__]
    structs = [s for s in structs if isinstance(s, type) and issubclass(s, msgspec.Struct)]
    structs.sort(key=lambda s: inspect.getsourcelines(s)[1])  # as messages.py declares them
    for struct in structs:
        is_message = issubclass(struct, messages.Message) and struct is not messages.Message
        lines += [f"### {struct.__name__}", ""]
        if _doc(struct):
            lines += [_doc(struct), ""]
        if is_message:
            where = ", ".join(carriers.get(struct.__name__, [])) or "none of `STREAMS` or `KEYS`"
            tag = struct.__struct_config__.tag
            lines += [f"Its `type` tag: `{tag}`; carried on {where}. The envelope's fields, and:", ""]
        lines += ["| Field | Type | Default | Meaning |", "|---|---|---|---|"]
        for f in msgspec.structs.fields(struct):
            if is_message and f.name in envelope:
                continue
            meaning = said.get(f"{struct.__name__}.{f.name}", "")
            lines.append(f"| `{f.name}` | {_type(f.type, aliases)} | {_default(f)} | {cell(meaning)} |")
        lines.append("")
    return lines


def wire_page() -> str:
    """The wire contract: names, messages, value sets, constants."""
    said = comments(messages)
    lines = [
        "# Wire contract",
        "",
        "<!-- Generated by `python -m spex.cli.docs_reference` from spex.proto (proto/names.py, "
        "proto/messages.py): edit that, not this. -->",
        "",
        "## Streams and keys",
        "",
        _doc(names),
        "",
        *_names_section(),
        "## Messages",
        "",
        _doc(messages),
        "",
        *_structs_section(),
        "## Value sets",
        "",
        "| Set | Values | Tuple | Meaning |",
        "|---|---|---|---|",
    ]
    for alias, values, held in _value_sets():
        shown = ", ".join(_json(v) for v in values)
        lines.append(f"| `{alias}` | {shown} | {f'`{held}`' if held else ''} | {cell(said.get(alias, ''))} |")
    lines += ["", "## Constants", "", "| Name | Value | Meaning |", "|---|---|---|"]
    for attr in messages.__all__:
        value = getattr(messages, attr)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            lines.append(f"| `{attr}` | {_json(value)} | {cell(said.get(attr, ''))} |")
    return "\n".join(lines).rstrip("\n") + "\n"
