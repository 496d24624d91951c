"""MessagePack codec with one typed decoder per stream."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from proto.messages import PROTOCOL_VERSION, Message
from proto.streams import STREAMS

__all__ = ["ProtocolError", "decode", "encode"]


class ProtocolError(ValueError):
    """A payload that is not a valid message. Unrecoverable: retrying cannot help, so the
    message goes to the dead-letter stream with this error's text as the reason."""


_encoder = msgspec.msgpack.Encoder()


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def _stream_types(stream: str) -> tuple[type[Message], ...]:
    if stream in STREAMS:
        return STREAMS[stream]
    if stream.startswith("{q:") and stream.endswith("}:in"):
        return STREAMS["{q:}:in"]
    for prefix, types in STREAMS.items():
        if prefix.endswith(":") and stream.startswith(prefix):
            return types
    raise ProtocolError(f"no message types are registered for stream {stream!r}")


@cache
def _decoder(types: tuple[type[Message], ...]) -> msgspec.msgpack.Decoder[Any]:
    target: Any = types[0] if len(types) == 1 else Any
    if len(types) > 1:
        from typing import Union

        target = Union[types]  # noqa: UP007 - a runtime union of a tuple of types
    return msgspec.msgpack.Decoder(target)


_peek = msgspec.msgpack.Decoder(dict[str, Any])


def decode(stream: str, payload: bytes) -> Message:
    """Decode `payload` read from `stream`; raises ProtocolError if it is not one of the
    stream's message types at this protocol version."""
    try:
        head = _peek.decode(payload)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"not a MessagePack map: {exc}") from None
    version = head.get("v", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"unknown protocol version {version!r} (this service speaks {PROTOCOL_VERSION})")
    try:
        return _decoder(_stream_types(stream)).decode(payload)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ProtocolError(f"invalid {head.get('type', 'message')!s} on {stream}: {exc}") from None
