"""MessagePack codec with one typed decoder per stream or key."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

import msgspec

from spex.proto.messages import MAX_MESSAGE_BYTES, PROTOCOL_VERSION, Message
from spex.proto.names import message_types

__all__ = ["Envelope", "ProtocolError", "decode", "encode", "envelope"]


class ProtocolError(ValueError):
    """A payload that is not a valid message. Unrecoverable: retrying cannot help, so the
    message goes to the dead-letter stream with this error's text as the reason."""


class Envelope(msgspec.Struct):
    """What a message's bytes name, read leniently from one that does not decode (a value
    outside its set, a field missing): enough to tell its query that its job was given up on."""

    type: str = ""
    msg_id: str = ""
    query_id: str = ""
    epoch: int = 0
    job_id: str = ""
    node_id: str = ""


_encoder = msgspec.msgpack.Encoder()
_envelope = msgspec.msgpack.Decoder(Envelope)


def envelope(payload: bytes) -> Envelope | None:
    """The ids `payload` names, or None if even they cannot be read."""
    if len(payload) > MAX_MESSAGE_BYTES:
        return None
    try:
        return _envelope.decode(payload)
    except (msgspec.DecodeError, RecursionError):
        return None


def encode(message: Message) -> bytes:
    """The message as MessagePack; ProtocolError if it exceeds MAX_MESSAGE_BYTES."""
    try:
        payload = _encoder.encode(message)
    except (UnicodeEncodeError, OverflowError) as exc:  # a lone surrogate; an int past 64 bits
        raise ProtocolError(f"{type(message).__name__} cannot be encoded: {exc}") from None
    if len(payload) > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            f"{type(message).__name__} of {len(payload):,} bytes exceeds the {MAX_MESSAGE_BYTES:,}-byte limit"
        )
    return payload


@cache
def _decoder(types: tuple[type[Message], ...]) -> msgspec.msgpack.Decoder[Any]:
    target: object = types[0] if len(types) == 1 else Union[types]  # noqa: UP007 - a runtime union
    return msgspec.msgpack.Decoder(target)


_peek = msgspec.msgpack.Decoder(dict[str, object])


def decode(name: str, payload: bytes) -> Message:
    """Decode `payload` read from the stream or key `name`; raises ProtocolError if it is not
    one of the message types `name` carries at this protocol version."""
    if len(payload) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"{len(payload):,} bytes exceed the {MAX_MESSAGE_BYTES:,}-byte message limit")
    try:
        head = _peek.decode(payload)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"not a MessagePack map: {exc}") from None
    except RecursionError:  # arrays or maps nested deeper than the interpreter's stack allows
        raise ProtocolError("nested too deeply to decode") from None
    version = head.get("v", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"unknown protocol version {version!r} (this service speaks {PROTOCOL_VERSION})")
    try:
        types = message_types(name)
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None
    try:
        return _decoder(types).decode(payload)
    except msgspec.ValidationError as exc:
        raise _invalid(name, types, head, str(exc)) from None
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"invalid {head.get('type', 'message')!s} on {name}: {exc}") from None


def _invalid(
    name: str, types: tuple[type[Message], ...], head: dict[str, object], error: str
) -> ProtocolError:
    """A field with a bad value reads `field: problem (invalid Type on stream)`, the field first
    as in the services' own reasons, with a value set's values; anything else (a field
    missing), as msgspec says. msgspec's ValidationError holds its text alone (no field, no
    path), so the field is found by converting each field the payload holds, in its order,
    to its declared type: the first that fails is the one the decoder stopped at."""
    kind = head.get("type", "message")
    cls = next((c for c in types if c.__name__ == kind), None)
    if cls is None and "type" in head:
        known = ", ".join(c.__name__ for c in types)
        return ProtocolError(f"type: unknown {kind!r}; known: {known} (invalid {kind!s} on {name})")
    declared = {f.encode_name: f for f in msgspec.structs.fields(cls)} if cls is not None else {}
    for key, value in head.items():
        field = declared.get(key)
        if field is None:  # the type tag, or a field this version does not know
            continue
        try:
            msgspec.convert(value, field.type)
        except msgspec.ValidationError as exc:
            values = get_args(field.type) if get_origin(field.type) is Literal else ()
            known = f"; known: {', '.join(map(str, values))}" if values else ""
            return ProtocolError(f"{field.name}: {exc}{known} (invalid {kind!s} on {name})")
        except RecursionError:  # nested deeper than converting it allows: as msgspec says
            break
    return ProtocolError(f"invalid {kind!s} on {name}: {error}")
