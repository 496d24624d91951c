"""A process supervisor for `spex up` and `spex chaos`: every service is a child process,
restarted with exponential backoff when it exits unasked, and each restart is reported. Every
child holds the supervisor's lifeline (`lifeline.py`): if the supervisor dies, however it dies,
its children stop.

A child that ran for `STABLE_S` before it died starts again after `FIRST_BACKOFF_S`; one that
keeps dying waits twice as long each time, up to `MAX_BACKOFF_S`. Its log file is appended to
across restarts (the supervisor never reads a pipe, so a chatty child cannot block on it), and
rotated by size: past `max_log_bytes` it is copied to `<name>.log.1` (the older ones shifted
to `.2` … `.<logs_kept>`, the oldest dropped) and emptied in place (logrotate's copytruncate:
the child writes on to the same file, which it opened for appending; a line written while the
file is copied may be lost).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spex.shared.runtime.lifeline import Lifeline

__all__ = ["Supervisor", "stop_reason"]

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STABLE_S = 30.0  # a child that ran this long before it died was healthy: backoff starts over
LOG_MAX_BYTES = 10 * 1024 * 1024  # a child's log is rotated past this size
LOGS_KEPT = 3  # rotated logs kept besides the live one (<name>.log.1 … .3)


@dataclass
class _Child:
    kind: str
    name: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0
    failures: int = 0  # consecutive quick deaths
    due: float | None = None  # when a restart is scheduled
    paused: bool = False  # told to stay down (chaos: a kill that is not restarted yet)
    history: list[str] = field(default_factory=list)


class Supervisor:
    """`add` services, `watch()` in a thread (or call `poll()`), `stop()` at the end."""

    def __init__(
        self,
        log_dir: Path,
        say: Callable[[str], None] = print,
        max_log_bytes: int = LOG_MAX_BYTES,
        logs_kept: int = LOGS_KEPT,
    ) -> None:
        self.log_dir = log_dir
        self.say = say
        self.max_log_bytes, self.logs_kept = max_log_bytes, logs_kept
        self.children: dict[str, _Child] = {}
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lifeline = Lifeline()

    def add(self, kind: str, name: str, env: dict[str, str]) -> None:
        with self._lock:
            child = self.children[name] = _Child(kind, name, env)
            self._start(child)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def _start(self, child: _Child) -> None:
        with self.log_path(child.name).open("ab") as log:
            child.proc = subprocess.Popen(
                [sys.executable, "-m", f"spex.services.{child.kind}"],
                env={**child.env, **self._lifeline.env()},
                stdout=log,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches the supervisor, which stops children in order
                pass_fds=(self._lifeline.fd,),  # ... and its death reaches them through this
            )
        child.started, child.due = time.monotonic(), None

    def poll(self) -> None:
        """Restart every child that exited unasked, once its backoff has passed; rotate every
        log past `max_log_bytes`."""
        now = time.monotonic()
        with self._lock:
            for child in self.children.values():
                self._rotate(self.log_path(child.name))
                if self._stopping.is_set() or child.paused or child.proc is None:
                    continue
                status = child.proc.poll()
                if status is None:
                    continue
                if child.due is None:
                    quick = now - child.started < STABLE_S
                    child.failures = child.failures + 1 if quick else 1
                    wait = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (child.failures - 1))
                    child.due = now + wait
                    note = f"{child.name} exited (status {status}); restarting in {wait:.1f} s"
                    why = stop_reason(_tail(self.log_path(child.name)))
                    if why:
                        note += f"; its log says why: {why}"
                    child.history.append(note)
                    self.say(note)
                elif now >= child.due:
                    child.restarts += 1
                    self._start(child)
                    self.say(f"{child.name} restarted (restart {child.restarts})")

    def _rotate(self, path: Path) -> None:
        try:
            if path.stat().st_size < self.max_log_bytes:
                return
            for i in range(self.logs_kept - 1, 0, -1):
                older = path.with_name(f"{path.name}.{i}")
                if older.exists():
                    older.replace(path.with_name(f"{path.name}.{i + 1}"))
            with path.open("rb") as live, path.with_name(f"{path.name}.1").open("wb") as kept:
                shutil.copyfileobj(live, kept)
            os.truncate(path, 0)
        except OSError:  # gone, or the disk is full: the next poll tries again
            return

    def watch(self, every_s: float = 0.2) -> None:
        """Poll in a daemon thread until `stop()`."""

        def loop() -> None:
            while not self._stopping.wait(every_s):
                self.poll()

        self._thread = threading.Thread(target=loop, name="supervisor", daemon=True)
        self._thread.start()

    def stopping(self, wait_s: float = 0.0) -> bool:
        """Whether `stop()` was called (waiting up to `wait_s` for it)."""
        return self._stopping.wait(wait_s)

    def exited(self) -> list[str]:
        """Children that are down now (exited and not restarted yet)."""
        with self._lock:
            return [
                c.name for c in self.children.values() if c.proc is not None and c.proc.poll() is not None
            ]

    def pid(self, name: str) -> int:
        proc = self.children[name].proc
        assert proc is not None
        return proc.pid

    def signal(self, name: str, sig: int) -> None:
        """Send `sig` to a child (SIGKILL: a crash, restarted like any other exit)."""
        with self._lock:
            proc = self.children[name].proc
            if proc is not None and proc.poll() is None:
                proc.send_signal(sig)
                if sig == signal.SIGKILL:
                    proc.wait()

    def relaunch(self, down_s: float = 0.5, timeout_s: float = 15.0) -> None:
        """What a SIGKILL of the supervisor and a new one on the same services look like from
        the services' side: the lifeline breaks, every child stops by itself (none is
        signalled), and after `down_s` all start again on a new lifeline. Their restart
        counters are the new supervisor's: not counted as restarts."""
        with self._lock:
            old, self._lifeline = self._lifeline, Lifeline()
            procs = [c.proc for c in self.children.values() if c.proc is not None and c.proc.poll() is None]
            for proc in procs:
                proc.send_signal(signal.SIGCONT)  # a stalled child too sees its lifeline break
            old.close()  # the children's only writer is gone
            _reap(procs, timeout_s)
            time.sleep(down_s)
            for child in self.children.values():
                if not child.paused:
                    child.failures = 0
                    self._start(child)

    def hold(self, name: str, down: bool) -> None:
        """Keep a child down (`down`) or let the supervisor restart it again."""
        with self._lock:
            self.children[name].paused = down

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every child (SIGCONT first, in case one is stopped), then SIGKILL stragglers."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            procs = [c.proc for c in self.children.values() if c.proc is not None and c.proc.poll() is None]
            for proc in procs:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
            _reap(procs, timeout_s)
        self._lifeline.close()


def _reap(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """Wait for `procs` to exit, all within `timeout_s`; SIGKILL those still running then."""
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_reason(log: str, limit: int = 300) -> str:
    """Why a service stopped, from its log (its last run's lines): its `spex <service>: error:`
    line, or the error of its last `service_failed` event, or else its last line — never the
    `service_stopped` its entry point writes last whatever the cause (""; no output)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    last = ""
    for line in reversed(lines):
        if ": error: " in line:
            return line[:limit]
        if '"service_failed"' in line:
            with contextlib.suppress(ValueError, AttributeError):
                event = json.loads(line)
                return f"{event.get('error_type', 'error')}: {event.get('error', '')}"[:limit]
            return line[:limit]
        if '"service_started"' in line:  # an earlier run's errors are not this stop's
            break
        if not last and '"service_stopped"' not in line:
            last = line
    return (last or (lines[-1] if lines else ""))[:limit]


def _tail(path: Path, size: int = 16384) -> str:
    """The last `size` bytes of a log ("" if it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
