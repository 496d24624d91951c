"""Reading Redis streams on one Redis or a cluster, and stream entry ids.

`read_streams` is one XREAD (or XREADGROUP) on one Redis; on a Redis Cluster, where one
command reaches one slot, a read of several slots is one non-blocking command per slot,
repeated with a growing pause (`POLL_MS`) until the wait is over. The bus
(`spex.shared.runtime.bus`) and the publisher (`spex.shared.runtime.publisher`) build on these.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import redis.asyncio as aioredis
from redis.crc import key_slot
from redis.exceptions import ResponseError
from redis.typing import KeyT, StreamIdT

from spex.proto.text import as_str
from spex.shared.runtime.replies import Entry, StreamInfo, StreamRead

__all__ = ["POLL_MS", "ScriptCall", "entry_after", "is_cluster", "parse_entry_id", "read_streams"]

POLL_MS = (1, 25)  # a read across cluster slots: first pause, longest pause between passes

# A script run with its keys and arguments: (the registered script, keys, args).
ScriptCall = tuple[Any, list[str], list[object]]


def is_cluster(client: object) -> bool:
    return isinstance(client, aioredis.RedisCluster)


async def read_streams(
    r: aioredis.Redis,
    streams: dict[str, str],
    count: int,
    block_ms: int | None,
    group: tuple[str, str] | None = None,
) -> list[tuple[str, list[Entry]]]:
    """XREAD (or XREADGROUP as `group` = (group, consumer)) of `streams` (name -> after id),
    waiting up to `block_ms` for something: [(stream, entries)]. On one Redis, one command;
    on a cluster, one per slot, all sent at once, repeated with a growing pause. A non-blocking
    read from `$` never returns anything, so on that path each `$` in `streams` is replaced (in
    the caller's dict) by the stream's last entry id: the caller's next read goes on from it."""
    if not streams:
        return []

    async def once(names: dict[KeyT, StreamIdT], block: int | None) -> StreamRead:
        if group is None:
            return cast(StreamRead, await r.xread(names, count=count, block=block))
        return cast(StreamRead, await r.xreadgroup(group[0], group[1], names, count=count, block=block))

    slots: dict[int, dict[KeyT, StreamIdT]] = {}
    if is_cluster(r):
        for name, after in streams.items():
            slots.setdefault(key_slot(name.encode()), {})[name] = after
    if len(slots) <= 1:
        whole: dict[KeyT, StreamIdT] = {name: after for name, after in streams.items()}
        return [(as_str(stream), entries) for stream, entries in (await once(whole, block_ms)) or []]
    for name in [n for n, after in streams.items() if after == "$"]:
        try:
            info = cast(StreamInfo, await r.xinfo_stream(name))
            streams[name] = slots[key_slot(name.encode())][name] = as_str(info["last-generated-id"])
        except ResponseError:  # no such stream yet: everything it will hold is new
            streams[name] = slots[key_slot(name.encode())][name] = "0-0"
    deadline = time.monotonic() + (block_ms or 0) / 1000
    pause = POLL_MS[0]
    while True:
        replies = await asyncio.gather(*(once(names, None) for names in slots.values()))
        out = [(as_str(stream), entries) for reply in replies for stream, entries in reply or [] if entries]
        left = deadline - time.monotonic()
        if out or block_ms is None or left <= 0:
            return out
        await asyncio.sleep(min(pause / 1000, left))
        pause = min(2 * pause, POLL_MS[1])


def parse_entry_id(entry_id: str) -> tuple[int, int]:
    """A stream entry id `ms-seq` as a pair that sorts as Redis orders entries."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def entry_after(entry_id: str, last_id: str) -> bool:
    """Whether entry `entry_id` comes after `last_id` ("0": before every entry)."""
    return parse_entry_id(entry_id) > parse_entry_id(last_id)
