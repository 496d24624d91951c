"""A query's tree as kept once it is answered: its tree stream's entries in one record.

While a query is searched its node events go to its tree stream (`names.query_tree`, one
entry each). As the coordinator answers it, it reads the stream, packs its entries into one
record (`names.query_tree_record`, expiring with the answer) and deletes the stream: a
stream spends a few hundred bytes of bookkeeping on each entry, and node events repeat
their texts and ids, which compress well.

The record keeps every entry as the stream held it, its id and its encoded `NodeEvent`, so a
reader (`IngressClient.tree_events`) reads either by the same entry ids: a cursor taken on the
stream goes on in the record, and the tree folded from it is the one the stream gave.

Format: zlib (level `LEVEL`) of a MessagePack array of `[entry id, event bytes]` pairs, in
stream order. It holds what the stream held, at most `TREE_EVENTS_KEPT` entries (the stream's
own cap), each within the message limit.
"""

from __future__ import annotations

import zlib

import msgspec

from spex.proto.codec import ProtocolError

__all__ = ["LEVEL", "MAX_RECORD_BYTES", "TREE_EVENTS_KEPT", "TreeEntries", "pack_tree", "unpack_tree"]

TREE_EVENTS_KEPT = 100_000  # node events a tree stream keeps (a tree of 20k nodes, several each)
LEVEL = 6  # zlib's default: most of level 9's ratio at a fraction of its time
MAX_RECORD_BYTES = 256 * 2**20  # what a reader inflates at most (a record is far smaller)
# (entry id, encoded NodeEvent) in stream order.
TreeEntries = list[tuple[str, bytes]]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[tuple[str, bytes]])


def pack_tree(entries: TreeEntries) -> bytes:
    """The record of a tree stream's `entries`."""
    return zlib.compress(_encoder.encode(entries), LEVEL)


def unpack_tree(blob: bytes) -> TreeEntries:
    """The entries of a record; ProtocolError if it is not one."""
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(blob, MAX_RECORD_BYTES)
        if inflate.unconsumed_tail:
            raise ProtocolError(f"a tree record inflates past {MAX_RECORD_BYTES:,} bytes")
        return _decoder.decode(raw)
    except (zlib.error, msgspec.DecodeError) as exc:
        raise ProtocolError(f"not a tree record: {exc}") from None
