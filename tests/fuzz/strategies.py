"""Hypothesis strategies for every wire message, and for bytes that are not one.

`message(cls)` is derived from the msgspec struct's fields (`msgspec.structs.fields`), so a
field added to a message is fuzzed without touching this file: every `int` ranges over the
MessagePack integer bounds, every `float` over nan/±inf/-0.0/1e308, every `str` over empty,
very long, astral, vocabulary words and ids with odd characters, every `list` over empty and
long. `arbitrary_payload()` is what a broken or hostile producer could XADD instead: random
bytes, truncated messages, MessagePack of the wrong shape, missing fields, wrong field types,
an unknown `type` tag, a `v` other than 1, absurd nesting, duplicate and non-string keys.
"""

from __future__ import annotations

import math
import operator
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from hypothesis import strategies as st

from spex.proto import CONTENTS, MAX_MESSAGE_BYTES, PROTOCOL_VERSION, SIM_STYLES, Message, Synthetic
from spex.proto.names import KEYS, SINGLE, STREAMS, Name, QueryName
from spex.proto.submission import MODES
from spex.shared.core.search import SEARCHES

__all__ = [
    "ALL_MESSAGES",
    "BATCH",
    "EXTREME_FLOATS",
    "EXTREME_INTS",
    "ODD_IDS",
    "SEED_ENTRIES",
    "any_message",
    "arbitrary_payload",
    "concrete_names",
    "encoded",
    "entry_batches",
    "entry_fields",
    "floats",
    "ints",
    "message",
    "plausible",
    "same",
    "weighted",
    "strings",
]

INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1  # what MessagePack holds
EXTREME_INTS = (
    *(0, 1, -1, 2, 255, 256, 65_535),
    *(2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32),
    *(2**53 + 1, INT64_MAX, INT64_MIN, -INT64_MAX, UINT64_MAX),
)
EXTREME_FLOATS = (
    *(0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf),
    *(1e308, -1e308, 1.7976931348623157e308, 5e-324, -5e-324),
    *(1.0, -1.0, 0.5, 1.0000000000000002, 2.0**63, -(2.0**63)),
)
# Ids as a producer could write them: Redis hash-tag braces, name separators, NUL, globs,
# stream-id look-alikes, other services' names, bidi and BOM characters.
ODD_IDS = (
    *("", "{", "}", "{}", "}{", ":", "::", "/", "//", "\x00", "a\x00b", "*", "?", "[a-z]"),
    *("$", ">", "0", "0-0", "-", "+", " ", "\t", "\n", "\r\n", "a b", "%00", "\\", "'\"", "..", "../.."),
    *("{q:x}:in", "ingress:new", "dlq:score:jobs", "gen:jobs:default", "q:{x}", "}:in"),
    *("é", "𝔸", "ки", "\u202e", "\ufeff", "\u0301", "🦀" * 3, "x" * 200),
)
# Words the services act on, so fuzzed messages also reach the paths past validation.
VOCABULARY = (
    *SEARCHES,
    *MODES,
    *CONTENTS,
    *("bfs", "dfs", "stop", "eos", "length", "abort", "error", "generate", "score", "prm", "sim"),
    *("logprob", "ки", "The answer is 4", "\\boxed{4}"),
)
SURROGATES = ("\ud800", "\udbff", "\udc00", "\udfff", "\udc80")  # cannot be UTF-8: encode refuses them


# ---------------------------------------------------------------------------- scalars


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each `weight` times as likely (`st.one_of` flattens nested
    one_ofs and weighs every leaf alike, so it cannot say this)."""
    return st.sampled_from([s for weight, s in choices for _ in range(weight)]).flatmap(lambda s: s)


def ints() -> st.SearchStrategy[int]:
    """Integers at and inside the MessagePack bounds, biased to the edges."""
    return st.one_of(st.sampled_from(EXTREME_INTS), st.integers(INT64_MIN, UINT64_MAX), st.integers(-2, 300))


def floats() -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(EXTREME_FLOATS), st.floats())


def long_strings(max_chars: int = 10_000) -> st.SearchStrategy[str]:
    """Long strings made by repetition (cheap to draw, up to `max_chars` code points)."""
    pieces = st.sampled_from(["x", "é", "𝔸", "ки", "\x00", "{}:/", "ab\n", "🦀 "])
    return st.builds(
        lambda piece, n: (piece * (n // len(piece) + 1))[:n], pieces, st.integers(1_000, max_chars)
    )


def strings(surrogates: bool = False, short: bool = False) -> st.SearchStrategy[str]:
    """Any text a str field could hold; `surrogates` adds lone surrogates (not encodable);
    `short` leaves out the long ones (for the elements of long lists)."""
    parts = [
        st.sampled_from(ODD_IDS),
        st.sampled_from(VOCABULARY),
        st.text(max_size=3 if short else 40),
        st.text(st.characters(min_codepoint=0x10000), max_size=3 if short else 12),
    ]
    if not short:
        parts.append(long_strings())
    if surrogates:
        parts.append(
            st.builds(operator.add, st.text(max_size=4), st.sampled_from(SURROGATES)).map(lambda s: s + "z")
        )
    return st.one_of(parts)


def _long_list(element: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """A list of 64 to 3,000 items, made by repeating a few drawn ones."""
    return st.builds(
        lambda items, n: (items * (n // len(items) + 1))[:n],
        st.lists(element, min_size=1, max_size=4),
        st.integers(64, 3_000),
    )


# ---------------------------------------------------------------------------- messages


def _is_id(field: str) -> bool:
    return field.endswith(("_id", "_ids")) or field in ("worker", "client")


def for_type(
    tp: Any, *, text: st.SearchStrategy[str], short_text: st.SearchStrategy[str]
) -> st.SearchStrategy[Any]:
    """A strategy for a field of type `tp` (a msgspec field type)."""
    origin = typing.get_origin(tp)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return ints()
    if tp is float:
        return floats()
    if tp is str:
        return text
    if tp is type(None):
        return st.none()
    if origin in (typing.Union, types.UnionType):
        return st.one_of([for_type(a, text=text, short_text=short_text) for a in typing.get_args(tp)])
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        (item,) = typing.get_args(tp)[:1] or (Any,)
        element = for_type(item, text=text, short_text=short_text)
        short = for_type(item, text=short_text, short_text=short_text)
        return st.one_of(st.just([]), st.lists(element, max_size=6), _long_list(short)).map(origin or list)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return struct(tp)
    if tp is Any:
        return msgpack_values()
    return st.from_type(tp)


def struct(
    cls: type[msgspec.Struct],
    *,
    ids: Sequence[str] = (),
    query_ids: Sequence[str] = (),
    surrogates: bool = False,
    **overrides: st.SearchStrategy[Any],
) -> st.SearchStrategy[Any]:
    """Instances of `cls`: every field from its type; optional fields sometimes left at their
    default; `ids` (if given) are drawn often for id-like fields and `query_ids` for
    `query_id`, so fuzzed messages can name queries and jobs that exist; `overrides` replace
    a field's strategy."""
    text, short_text = strings(surrogates), strings(surrogates, short=True)
    if ids:
        known = st.sampled_from(list(ids))
        id_text, id_short = weighted((3, known), (1, text)), weighted((3, known), (1, short_text))
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for f in msgspec.structs.fields(cls):
        if f.name in overrides:
            strategy = overrides[f.name]
        elif f.name == "v":
            strategy = st.just(PROTOCOL_VERSION)  # a wrong version is arbitrary_payload's
        elif f.name == "query_id" and query_ids:
            strategy = weighted((3, st.sampled_from(list(query_ids))), (1, text))
        elif ids and _is_id(f.name):
            strategy = for_type(f.type, text=id_text, short_text=id_short)
        else:
            strategy = for_type(f.type, text=text, short_text=short_text)
        (required if f.required else optional)[f.name] = strategy
    return st.fixed_dictionaries(required, optional=optional).map(lambda kw: cls(**kw))


def message(
    cls: type[Message],
    *,
    ids: Sequence[str] = (),
    query_ids: Sequence[str] = (),
    surrogates: bool = False,
    **overrides: Any,
) -> st.SearchStrategy[Message]:
    """Extreme-but-valid instances of the message `cls` (valid to msgspec: every field has its
    declared type; the services' own rules are what is being fuzzed)."""
    return struct(cls, ids=ids, query_ids=query_ids, surrogates=surrogates, **overrides)


# In `plausible` messages: values that pass a service's first checks, by field name (any
# message, any new field of that name), still reaching the extremes where they may.
_counts = weighted((12, st.integers(1, 2_000)), (1, st.sampled_from([0, 1, 4_096, 2**31, INT64_MAX])))
PLAUSIBLE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "content": weighted((3, st.just("synthetic")), (1, st.sampled_from(CONTENTS))),
    "algorithm": st.sampled_from(sorted(SEARCHES)),
    "mode": st.sampled_from(MODES),
    "finish_reason": st.sampled_from(["stop", "eos", "length", "abort"]),
    "kind": st.sampled_from(["generate", "score"]),
    "reward": st.one_of(st.sampled_from(["prm", "sim"]), floats()),
    "target": st.integers(1, 4),
    "seed": st.one_of(st.integers(0, 2**16), st.just(INT64_MAX)),
    "prompt_tokens": _counts,
    "max_new_tokens": st.one_of(st.integers(1, 300), st.just(INT64_MAX)),
    "priority": st.sampled_from([0, 1]),
    "tokens": _counts,
    "reference_answer": st.sampled_from(["", "4", "\\frac{1}{2}"]),
}


SYNTHETIC = st.builds(Synthetic, seed=st.integers(0, 2**16), style=st.sampled_from(SIM_STYLES))


@st.composite
def _plausible(draw: st.DrawFn, cls: type[Message], ids: Sequence[str], query_ids: Sequence[str]) -> Message:
    msg = draw(message(cls, ids=ids, query_ids=query_ids))
    types_ = {f.name: f.type for f in msgspec.structs.fields(cls)}
    tamed = [name for name in PLAUSIBLE_VALUES if isinstance(types_.get(name), type)]
    tamed += ["synthetic"] if "synthetic" in types_ else []  # the simulator's extension (optional)
    paired = types_.get("prompt_node_ids") == list[str] and types_.get("prompt_tokens") == list[int]
    # One of the fields (or none) keeps its extreme value: each first check is met alone.
    wild = draw(st.sampled_from([None, None, *tamed, *(["path"] if paired else [])]))
    changes: dict[str, Any] = {}
    for name in tamed:
        if name == "synthetic":
            if wild != name:
                changes[name] = draw(SYNTHETIC)
            continue
        kind = types_[name]
        value = draw(PLAUSIBLE_VALUES[name])
        if name != wild and isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            changes[name] = value
    if paired and wild != "path":  # a path with one token count per node
        nodes = st.sampled_from(list(ids)) if ids else strings(short=True)
        path = list(msg.prompt_node_ids)[:6] or draw(st.lists(nodes, min_size=1, max_size=6))
        changes["prompt_node_ids"] = path
        changes["prompt_tokens"] = draw(st.lists(_counts, min_size=len(path), max_size=len(path)))
    return msgspec.structs.replace(msg, **changes)


def plausible(
    cls: type[Message], ids: Sequence[str] = (), query_ids: Sequence[str] = ()
) -> st.SearchStrategy[Message]:
    """Messages of `cls` that pass a service's first checks (its words, a path with a token
    count per node, counts that are not negative) but for at most one field, while the other
    fields stay extreme: what reaches the code past validation, and each check on its own."""
    return _plausible(cls, ids, query_ids)


def _subclasses(cls: type) -> Iterable[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


# Every message type: those the name tables register, and any other subclass of Message.
ALL_MESSAGES: tuple[type[Message], ...] = tuple(
    sorted(
        {t for table in (STREAMS, KEYS) for ts in table.values() for t in ts} | set(_subclasses(Message)),
        key=lambda t: t.__name__,
    )
)


def any_message(
    ids: Sequence[str] = (), query_ids: Sequence[str] = (), surrogates: bool = False
) -> st.SearchStrategy[Message]:
    return st.one_of([message(t, ids=ids, query_ids=query_ids, surrogates=surrogates) for t in ALL_MESSAGES])


def encoded(messages: st.SearchStrategy[Message]) -> st.SearchStrategy[bytes]:
    """The messages as MessagePack, without the codec's size check (an oversized one is the
    receiver's to refuse)."""
    return messages.map(msgspec.msgpack.encode)


# ---------------------------------------------------------------------------- not messages


def msgpack_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any value MessagePack holds: nil, bools, ints, floats, str, bin, arrays, maps."""
    leaves = st.one_of(
        st.none(), st.booleans(), ints(), floats(), st.text(max_size=20), st.binary(max_size=20)
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-5, 5)), inner, max_size=4),
        ),
        max_leaves=max_leaves,
    )


_enc = msgspec.msgpack.encode
# A value of each MessagePack type, for replacing a field with one of another type.
WRONG_VALUES: tuple[Any, ...] = (
    *(None, True, False, "", "str", 0, -1, 1.5, math.nan, b"", b"\x00bytes"),
    *([], [1, "a"], {}, {"a": 1}, {"type": "ScoreResult"}, UINT64_MAX, INT64_MIN, "x" * 5000),
)
BAD_VERSIONS: tuple[Any, ...] = (
    *(0, 2, -1, 1.0, 1.5, True, INT64_MAX, UINT64_MAX, INT64_MIN, "1", "", None, b"\x01"),
    *([1], {"v": 1}, math.nan),
)


def _raw_map(pairs: Sequence[tuple[Any, Any]]) -> bytes:
    """A MessagePack map of `pairs` as given: duplicate keys and non-string keys included."""
    n = len(pairs)
    head = bytes([0x80 | n]) if n < 16 else b"\xde" + n.to_bytes(2, "big")
    return head + b"".join(_enc(k) + _enc(v) for k, v in pairs)


@st.composite
def _missing_fields(draw: st.DrawFn, dicts: st.SearchStrategy[dict[str, Any]]) -> bytes:
    d = draw(dicts)
    drop = set(draw(st.lists(st.sampled_from(sorted(d)), min_size=1, unique=True)))
    return _enc({k: v for k, v in d.items() if k not in drop})


@st.composite
def _wrong_type(draw: st.DrawFn, dicts: st.SearchStrategy[dict[str, Any]]) -> bytes:
    d = draw(dicts)
    names = draw(st.lists(st.sampled_from(sorted(d)), min_size=1, max_size=3, unique=True))
    for name in names:
        options = [w for w in WRONG_VALUES if type(w) is not type(d[name])]
        d[name] = draw(st.sampled_from(options))
    return _enc(d)


@st.composite
def _unknown_tag(draw: st.DrawFn, dicts: st.SearchStrategy[dict[str, Any]]) -> bytes:
    d = draw(dicts)
    known = [t.__name__ for t in ALL_MESSAGES]
    d["type"] = draw(
        st.one_of(
            st.text(max_size=20).filter(lambda s: s not in known),
            st.sampled_from(["Message", "LogprobSummary", "scoreresult", "ScoreResult ", "", "type"]),
            st.sampled_from(WRONG_VALUES),
        )
    )
    return _enc(d)


@st.composite
def _bad_version(draw: st.DrawFn, dicts: st.SearchStrategy[dict[str, Any]]) -> bytes:
    d = draw(dicts)
    d["v"] = draw(st.sampled_from(BAD_VERSIONS))
    return _enc(d)


@st.composite
def _odd_map(draw: st.DrawFn, dicts: st.SearchStrategy[dict[str, Any]]) -> bytes:
    """Duplicate keys (the later wins, or not), non-string keys, extra unknown fields."""
    pairs = list(draw(dicts).items())
    kind = draw(st.sampled_from(["duplicate", "non-str key", "extra"]))
    if kind == "duplicate" and pairs:
        i = draw(st.integers(0, len(pairs) - 1))
        pairs.append((pairs[i][0], draw(st.sampled_from(WRONG_VALUES))))
    elif kind == "non-str key":
        pairs.insert(draw(st.integers(0, len(pairs))), (draw(st.sampled_from([1, -1, 1.5, b"k", None])), 1))
    else:
        extra = draw(st.dictionaries(st.text(max_size=10), msgpack_values(4), min_size=1, max_size=3))
        pairs += [(k, v) for k, v in extra.items() if k not in dict(pairs)]
    return _raw_map(pairs)


@st.composite
def _nested(draw: st.DrawFn, payloads: st.SearchStrategy[bytes]) -> bytes:
    """A payload wrapped in very deep arrays or maps (past any recursion limit)."""
    depth = draw(st.sampled_from([1, 2, 100, 999, 1_000, 5_000, 100_000]))
    wrapper = draw(st.sampled_from([b"\x91", b"\x81\xa1a", b"\x81\xa1e", b"\xdd\x00\x00\x00\x01"]))
    return wrapper * depth + draw(payloads)


def arbitrary_payload(
    types: Sequence[type[Message]] = ALL_MESSAGES, oversize: bool = False
) -> st.SearchStrategy[bytes]:
    """Bytes a stream or key could hold that are (mostly) not a valid message of `types`;
    `oversize` adds payloads past MAX_MESSAGE_BYTES (1 MiB each: keep them out of big batches)."""
    valid = st.one_of([message(t) for t in types])
    payloads = encoded(valid)
    dicts = valid.map(msgspec.to_builtins)
    parts = [
        st.binary(max_size=256),
        st.builds(lambda p, k: p[: k % max(1, len(p))], payloads, st.integers(0, 2**20)),  # truncated
        st.builds(operator.add, payloads, st.binary(min_size=1, max_size=8)),  # trailing bytes
        msgpack_values().filter(lambda v: not isinstance(v, dict)).map(_enc),  # not a map
        msgpack_values().filter(lambda v: isinstance(v, dict)).map(_enc),  # a map, any shape
        _missing_fields(dicts),
        _wrong_type(dicts),
        _unknown_tag(dicts),
        _bad_version(dicts),
        _odd_map(dicts),
        _nested(st.one_of(payloads, st.just(b"\xc0"))),
        st.sampled_from(
            [
                b"",
                b"\xc1",  # the one byte MessagePack never uses
                b"\xd4\x01\x00",  # an extension type
                b"\xd6\xff\x00\x00\x00\x00",  # a timestamp
                b"\xdf\xff\xff\xff\xff",  # a map claiming 4 billion entries
                b"\xdb\xff\xff\xff\xff",  # a str claiming 4 GiB
                b"\x80",  # an empty map
                _enc({"type": None}),
                _enc({"v": 1}),
            ]
        ),
        encoded(any_message()),  # a valid message, of a type this name may not carry
    ]
    if oversize:
        parts.append(
            dicts.map(lambda d: _enc({**d, "pad": "x" * (MAX_MESSAGE_BYTES + 1)}))
        )  # over the size limit
    return st.one_of(parts)


def entry_fields(
    types: Sequence[type[Message]], ids: Sequence[str] = (), query_ids: Sequence[str] = ()
) -> st.SearchStrategy[dict[str, bytes]]:
    """The fields of one stream entry: mostly `{"e": payload}` — a message of `types` (most
    of them plausible), of any type, or arbitrary bytes — sometimes no `e` at all."""
    payload = weighted(
        (4, encoded(st.one_of([plausible(t, ids, query_ids) for t in types]))),
        (2, encoded(st.one_of([message(t, ids=ids, query_ids=query_ids) for t in types]))),
        (1, encoded(any_message(ids, query_ids))),
        (3, arbitrary_payload(types)),
    )
    without_e = st.one_of(
        st.builds(lambda x: {"x": x}, st.binary(max_size=16)),
        st.builds(lambda p: {"E": p}, payload),
        st.builds(lambda p: {"e ": p}, payload),
    )
    return weighted(
        (16, st.builds(lambda p: {"e": p}, payload)),
        (2, st.builds(lambda p, x: {"e": p, "x": x}, payload, st.binary(max_size=8))),
        (1, without_e),
    )


BATCH = 25  # fuzzed entries per case, at most


def entry_batches(
    types: Sequence[type[Message]], ids: Sequence[str], query_ids: Sequence[str] = (), max_size: int = BATCH
) -> st.SearchStrategy[list[dict[str, bytes]]]:
    """A batch of `entry_fields`: between a third of `max_size` and `max_size` entries."""
    entries = entry_fields(types, ids, query_ids)
    return st.lists(entries, min_size=max_size // 3, max_size=max_size)


# Payloads every grouped stream gets once, before the generated cases: the nastiest shapes.
SEED_ENTRIES: list[dict[str, bytes]] = [
    {"e": b""},
    {"e": b"\x91" * 5_000 + b"\xc0"},  # nested past the recursion limit
    {"e": b"\x81\xa1a" * 2_000 + b"\xc0"},
    {"e": b"x" * (MAX_MESSAGE_BYTES + 1)},  # over the message limit
    {"x": b"no body"},
]


# ---------------------------------------------------------------------------- helpers


def concrete_names(ids: Sequence[str] = ("x", "q0001", "{", "}", ":", "\x00", "é/𝔸")) -> list[str]:
    """Every stream and key name in names.STREAMS and names.KEYS, families built with `ids`."""
    out: list[str] = []
    for table in (STREAMS, KEYS):
        for family in table:
            if isinstance(family, Name):
                out += [family(i) for i in ids]
            elif isinstance(family, QueryName):
                out += [family(i, SINGLE) for i in ids]
            else:
                out.append(family)
    return out


def same(a: Any, b: Any) -> bool:
    """Equality that holds nan equal to nan (in a list or a map too) and tells -0.0 from 0.0."""
    if isinstance(a, msgspec.Struct) and isinstance(b, msgspec.Struct):
        if type(a) is not type(b):
            return False
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__struct_fields__)
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b
