"""A TCP fault proxy for failure-injection tests: pass, partition, blackhole and latency.

Tests put it between a service and Redis (`FaultProxy(host, port).start().url()`), then cut and
restore the link to act out a network partition. toxiproxy (a Go binary) is not available here,
so this is a small stdlib-only stand-in.

Modes:
- "pass": bytes go through both ways; each chunk waits `set_latency` seconds first.
- "partition": open connections are reset (a TCP RST: SO_LINGER 0, then close), and new ones are
  accepted and reset at once, so clients see connection errors quickly, never hangs.
- "blackhole": connections stay open but every byte is dropped, and new ones are accepted but never
  forwarded, so clients see timeouts. `heal()` closes these connections, so clients reconnect.

The proxy runs its own event loop in a daemon thread. Each public method blocks until that loop
has applied it (when `partition()` returns, the sockets are already reset), so sync code and code
on another event loop use it alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any

__all__ = ["FaultProxy"]

_CHUNK = 64 * 1024
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, timeout 0: close() sends RST, not FIN
_CALL_TIMEOUT_S = 5.0


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Drop a connection now with a TCP RST (no FIN, no TIME_WAIT)."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.fileno() != -1:
        with contextlib.suppress(OSError):  # already reset by the peer
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    writer.transport.abort()


class _Conn:
    """One client connection and its upstream connection (none if it arrived in a blackhole)."""

    def __init__(self, client: asyncio.StreamWriter, blackholed: bool) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.blackholed = blackholed
        self.closed = False
        self.task = asyncio.current_task()

    def close(self, rst: bool) -> None:
        self.closed = True
        for writer in (self.client, self.upstream):
            if rst:
                _reset(writer)
            elif writer is not None:
                writer.close()


class FaultProxy:
    """Forwards 127.0.0.1:<port> to target host:port. Runs its own asyncio loop in a daemon thread,
    so sync and async callers alike can use it."""

    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        self.target_host, self.target_port = target_host, target_port
        self._port = port
        self._mode = "pass"
        self._latency = 0.0
        self._closing = False
        self._conns: set[_Conn] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # start/stop

    # -- public API (any thread) --

    def start(self) -> FaultProxy:
        with self._lock:
            if self._loop is not None:
                raise RuntimeError("FaultProxy already started")
            self._loop, self._closing = asyncio.new_event_loop(), False
            self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
            self._thread.start()
        try:
            self._call(self._listen())
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def port(self) -> int:
        return self._port

    def url(self, scheme: str = "redis", db: int = 0) -> str:
        return f"{scheme}://127.0.0.1:{self._port}/{db}"

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def connections(self) -> int:
        return len(self._conns)

    def partition(self) -> None:
        self._call(self._switch("partition"))

    def blackhole(self) -> None:
        self._call(self._switch("blackhole"))

    def heal(self) -> None:
        self._call(self._switch("pass"))

    def set_latency(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("latency must be >= 0")
        self._latency = float(seconds)  # one attribute store: atomic; read by the pumps per chunk

    def stop(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        try:
            if self._server is not None:
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(_CALL_TIMEOUT_S)
        finally:
            self._server = None
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_CALL_TIMEOUT_S)
            loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- on the proxy's loop --

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        loop = self._loop
        if loop is None:
            coro.close()
            raise RuntimeError("FaultProxy is not running")
        asyncio.run_coroutine_threadsafe(coro, loop).result(_CALL_TIMEOUT_S)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self._port)
        self._port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._closing = True  # connections accepted but not yet handled are reset at once
        self._server.close()
        await self._close_all(rst=True)
        if rest := asyncio.all_tasks() - {asyncio.current_task()}:
            await asyncio.wait(rest, timeout=1.0)
        await self._server.wait_closed()

    async def _switch(self, mode: str) -> None:
        self._mode = mode
        if mode == "partition":
            await self._close_all(rst=True)
        elif mode == "blackhole":
            for conn in self._conns:
                conn.blackholed = True
        else:
            await self._close_all(rst=False, only_blackholed=True)

    async def _close_all(self, rst: bool, only_blackholed: bool = False) -> None:
        """Close connections, then wait until their sockets are really closed."""
        conns = [c for c in self._conns if c.blackholed or not only_blackholed]
        for conn in conns:
            conn.close(rst)
        tasks = {c.task for c in conns if c.task is not None}
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=1.0)
            for task in pending:  # stuck connecting upstream
                task.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing or self._mode == "partition":
            _reset(writer)
            return
        conn = _Conn(writer, blackholed=self._mode == "blackhole")
        self._conns.add(conn)
        try:
            if conn.blackholed:
                await self._pump(conn, reader, None)
            else:
                await self._forward(conn, reader)
        finally:
            self._conns.discard(conn)
            conn.close(rst=False)

    async def _forward(self, conn: _Conn, client_reader: asyncio.StreamReader) -> None:
        try:
            up_reader, conn.upstream = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            conn.close(rst=True)
            return
        if conn.closed:  # cut while connecting
            conn.close(rst=True)
            return
        await asyncio.gather(
            self._pump(conn, client_reader, conn.upstream),
            self._pump(conn, up_reader, conn.client),
        )

    async def _pump(self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter | None) -> None:
        """Copy src to dst until EOF, dropping bytes while blackholed; a reset cuts both sides."""
        try:
            while data := await src.read(_CHUNK):
                if self._latency:
                    await asyncio.sleep(self._latency)
                if dst is not None and not conn.blackholed and not dst.is_closing():
                    dst.write(data)
                    await dst.drain()
            if dst is not None and not conn.blackholed and not dst.is_closing() and dst.can_write_eof():
                dst.write_eof()  # half-close: pass the FIN on, keep the other direction open
        except OSError:
            conn.close(rst=True)
