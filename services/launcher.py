"""`spex up` (and `spex demo`'s pipeline): a real Redis (embedded by default) and every service as its own
process under a supervisor (a crashed service is restarted with backoff, and says so), with
health checks and a clean shutdown on Ctrl-C.

The embedded Redis keeps its data in a directory (`--data-dir`, default
`$XDG_DATA_HOME/spex`, else `~/.local/share/spex`) with an append-only file fsynced every
second, so `spex up` on the same directory resumes every pending question. It is protected by
a random password kept in that directory (mode 0600) and handed to the services as a file
name, never on a command line and never printed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, replace
from pathlib import Path

from rich.console import Console

from spex.shared.engine.api import SERVERS
from spex.shared.runtime.redis_server import RedisServer
from spex.shared.runtime.settings import ENV, Settings, urls, without_password
from spex.shared.runtime.stack import describe_stack, describe_step_curve
from spex.shared.runtime.supervisor import Supervisor, stop_reason

__all__ = [
    "default_data_dir", "lock_data_dir", "service_env", "service_names", "services", "start_limits", "up",
]  # fmt: skip

PASSWORD_FILE = "redis.password"
LOCK_FILE = "spex.lock"
# How long a service takes to start when it waits on nothing but Redis: imports and a connection.
# One that waits on a serving engine gets SPEX_ENGINE_WAIT_S on top (`start_limits`).
START_WAIT_S = 60.0


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "spex"


def embedded_redis(
    data_dir: Path, fsync: str = "everysec", lock: int | None = None
) -> tuple[RedisServer, Path]:
    """A durable, password-protected Redis on `data_dir` (created 0700 if missing); it stops
    when the thread that starts it dies, and holds `lock` (`lock_data_dir`'s) while it runs."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    _private(data_dir, "--data-dir")
    secret = data_dir / PASSWORD_FILE
    if not secret.exists():
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    _private(secret, "the Redis password file")
    password = secret.read_text().strip()
    held = () if lock is None else (lock,)
    server = RedisServer(
        data_dir=data_dir / "redis", password=password, fsync=fsync, die_with_parent=True, hold_fds=held
    )
    return server, secret


def lock_data_dir(data_dir: Path) -> int:
    """An exclusive lock on `data_dir` (its `LOCK_FILE`, holding our pid), or ValueError naming
    the flag and who holds it: two Redis servers on one append-only file corrupt it. The lock
    goes with the process and the Redis it is passed to: a SIGKILLed `spex up` leaves nothing
    locked once its Redis has stopped."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ValueError(
            f"--data-dir: {data_dir} is in use by another `spex up` (pid {holder}); stop it, or give another"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _private(path: Path, what: str) -> None:
    """`path` is ours and nobody else's: another user must not plant or read the password (the
    data directory holds it and Redis's data). The refusal names the fix."""
    st = path.lstat()
    if path.is_symlink():
        raise ValueError(f"{what}: {path} is a link: give the directory it points to, or another")
    if st.st_uid != os.getuid():
        raise ValueError(f"{what}: {path} belongs to another user: give one of your own")
    if st.st_mode & 0o077:
        private = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        raise ValueError(
            f"{what}: {path} is open to others (mode {stat.S_IMODE(st.st_mode):o}; it holds the Redis "
            f"password): run `chmod {private:o} {path}`"
        )


def _log_dir(data_dir: Path) -> Path:
    """`data_dir`/logs for this run's service logs; the last run's move to logs.previous (so a
    crash's logs survive one restart, and logs never grow without bound)."""
    logs, previous = data_dir / "logs", data_dir / "logs.previous"
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if logs.exists():
        shutil.rmtree(previous, ignore_errors=True)
        logs.rename(previous)
    logs.mkdir(mode=0o700)
    return logs


def service_env(settings: Settings, name: str, **extra: str) -> dict[str, str]:
    """A child's environment: this one's, with every setting (so children see one config)."""
    env = dict(os.environ)
    values = asdict(settings)
    for var, (field, _) in ENV.items():
        env[var] = str(values[field])
    env["SPEX_CONSUMER"] = name
    env.update(extra)
    return env


def engine_urls(raw: str, generators: int | None = None) -> list[str]:
    """`SPEX_ENGINE_URL` for `spex up`, a URL per generator (a generator is one worker per
    serving engine). Several URLs (replicas) get a generator each: `generators` left out, or as
    many. One URL (one server, or a Kubernetes Service balancing requests over replicas) serves
    every generator: `generators`, 1 if left out."""
    given = urls(raw)
    if len(given) <= 1:
        return given * (generators or 1)
    if generators is not None and generators != len(given):
        raise ValueError(
            f"--generators: {generators} for {len(given)} engine URLs; leave it out (a generator per URL), "
            "or give one URL (a Service in front of the replicas)"
        )
    return given


def services(generators: int, coordinators: int) -> list[tuple[str, str]]:
    """(kind, consumer name) of each service `up` starts, in the order it numbers them."""
    names = [("coordinator", f"coord-{i}") for i in range(coordinators)]
    names += [("generator", f"gen-{i}") for i in range(generators)]
    return names + [("scorer", "scorer-0"), ("allocator", "allocator-0"), ("ingress", "ingress-0")]


def service_names(generators: int, coordinators: int) -> list[str]:
    return [name for _, name in services(generators, coordinators)]


@contextlib.contextmanager
def up(
    settings: Settings,
    redis_url: str | None = None,
    generators: int = 1,
    coordinators: int = 1,
    console: Console | None = None,
    data_dir: Path | None = None,
    fsync: str = "everysec",
) -> Iterator[Settings]:
    """Start Redis (unless `redis_url`) and the services under a supervisor; stop them all on
    exit. Without `data_dir` the embedded Redis lives in a temporary directory."""
    say = console.print if console else (lambda _msg: None)
    scratch = tempfile.TemporaryDirectory(prefix="spex-up-")
    server, lock = None, None
    redis_stopped: threading.Event | None = None
    if not redis_url:
        home = data_dir or Path(scratch.name, "data")
        lock = lock_data_dir(home)
        try:
            server, secret = embedded_redis(home, fsync, lock)
            server.start()
        except BaseException:
            os.close(lock)
            raise
        settings = replace(settings, redis_url=server.url, redis_password="", redis_password_file=str(secret))
    else:
        settings = replace(settings, redis_url=redis_url)
        _reachable(settings)
    logs = _log_dir(data_dir) if data_dir is not None else Path(scratch.name)
    supervisor = Supervisor(logs, say=lambda msg: say(f"[yellow]spex up[/]: {msg}"))
    try:
        names = services(generators, coordinators)
        ports: dict[str, int] = {}
        engines = engine_urls(settings.engine_url, generators) if settings.engine in SERVERS else []
        for i, (kind, name) in enumerate(names):
            extra = {}
            if kind == "generator" and engines:  # one serving engine per generator
                extra["SPEX_ENGINE_URL"] = engines[int(name.rpartition("-")[2])]
            if settings.metrics_port:  # one port each: base, base + 1, ...
                ports[name] = settings.metrics_port + i
                extra["SPEX_METRICS_PORT"] = str(ports[name])
            supervisor.add(kind, name, service_env(settings, name, **extra))
        _wait_healthy(supervisor, logs, settings.engine_wait_s, kept=data_dir is not None)
        supervisor.watch()
        if server is not None:
            redis_stopped = _watch_redis(server, supervisor, say)
        where = f"Redis at {settings.redis_url}"
        if server is not None:
            where += f" (data in {server.data_dir}, password in {settings.redis_password_file})"
        say(f"[bold]spex up[/]: {where}; services: {', '.join(supervisor.children)}")
        base = f"http://{settings.http_host}:{settings.http_port}"
        say(f"HTTP ingress: {base}/v1/questions (live view: {base}/, OpenAI API: {base}/v1)")
        say(describe_stack(settings))
        say(f"speculation: objective {settings.objective}; step curve: {describe_step_curve(settings)}")
        say(f"logs: {logs}" + ("" if data_dir is not None else " (removed when this stops)"))
        if ports:
            say("metrics: " + ", ".join(f"{n} :{p}" for n, p in ports.items()))
        yield settings
    finally:
        supervisor.stop()
        if server is not None:
            server.stop()
            if redis_stopped is not None:
                redis_stopped.set()  # the watch thread may end: nothing it started runs now
        if lock is not None:
            os.close(lock)
        scratch.cleanup()


def _watch_redis(
    server: RedisServer, supervisor: Supervisor, say: Callable[[str], object]
) -> threading.Event:
    """Restart the embedded Redis (same port, data and password) if it dies. A Redis this
    thread starts dies with it (its parent-death signal is the thread's): the thread lives
    until the returned event is set, after `server.stop()`."""
    stopped = threading.Event()

    def loop() -> None:
        while not supervisor.stopping(0.5):
            if not server.running():
                say(f"[yellow]spex up[/]: Redis exited; restarting it on {server.data_dir}")
                with contextlib.suppress(RuntimeError):
                    server.start()
        stopped.wait()

    threading.Thread(target=loop, name="redis-watch", daemon=True).start()
    return stopped


def _reachable(settings: Settings, timeout_s: float = 5.0) -> None:
    """An external Redis answers and SPEX can use it (`connect.check_redis`: a password, a
    cluster, a replica), or one line naming the flag, the address and what to change."""
    import redis

    from spex.shared.runtime.connect import check_redis

    where = without_password(settings.redis_url)
    try:
        check_redis(settings, timeout_s)
    except redis.RedisError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"--redis: cannot reach {where}: {reason}") from None


def _wait_healthy(supervisor: Supervisor, logs: Path, engine_wait_s: float, kept: bool = True) -> None:
    """Every service has logged `service_started`, or ValueError in one line: the service
    that exited at start and its own one-line reason, or those not started within their limits
    (`start_limits`) with the last line each logged (and where their logs are, when `kept`:
    a scratch directory is gone by the time the message is read)."""
    started = time.monotonic()
    limits = start_limits(supervisor, engine_wait_s)
    waiting = set(supervisor.children)
    while waiting:
        for name in list(waiting):
            log = supervisor.log_path(name)
            if name in supervisor.exited():
                raise ValueError(
                    f"{name} did not start: {stop_reason(log.read_text(errors='replace')) or 'no output'}"
                )
            if b"service_started" in log.read_bytes():
                waiting.discard(name)
        late = sorted(n for n in waiting if time.monotonic() - started > limits[n])
        if late:
            names = ", ".join(_waits_on(supervisor, name) for name in late)
            text = f"not started after {max(limits[n] for n in late):.0f} s: {names}"
            last = {n: stop_reason(supervisor.log_path(n).read_text(errors="replace"), 160) for n in late}
            text += "".join(f"; {n}'s last line: {line}" for n, line in last.items() if line)
            text += f" (their logs: {logs})" if kept else ""
            if any(limits[n] > START_WAIT_S for n in late):  # a server still loading its model
                text += f"; SPEX_ENGINE_WAIT_S ({engine_wait_s:.0f} s) is how long an engine may load"
            raise ValueError(text)
        time.sleep(0.05)


def start_limits(supervisor: Supervisor, engine_wait_s: float) -> dict[str, float]:
    """How long each service may take to start, seconds: START_WAIT_S, and for one that waits on
    an engine (`_waits_for`) `engine_wait_s` more (a server gives up on its own after
    `engine_wait_s`, and its reason is then the one reported)."""
    return {
        name: START_WAIT_S + (engine_wait_s if _waits_for(child.kind, child.env) else 0.0)
        for name, child in supervisor.children.items()
    }


def _waits_for(kind: str, env: Mapping[str, str]) -> str:
    """What a service of `kind` with `env` waits on at start, in a phrase ("": nothing): a
    generator's vLLM or SGLang server, a scorer's served reward model, or an in-process
    generator measuring its engine's step curve (a sweep of a minute or more on a CPU, cached)."""
    if kind == "generator" and env.get("SPEX_ENGINE") in SERVERS:
        return f"its engine at {env.get('SPEX_ENGINE_URL', '')}"
    sweeps = env.get("SPEX_STARTUP_SWEEP", "1").strip().lower() in ("1", "true", "yes")
    if kind == "generator" and env.get("SPEX_ENGINE") == "hf" and sweeps and not env.get("SPEX_PROFILE_FILE"):
        return "its engine's step curve, measured at start"
    if kind == "scorer" and env.get("SPEX_PRM_URL"):  # SPEX_PRM beside it is only its tokenizer
        return f"its reward model at {env['SPEX_PRM_URL']}"
    return ""


def _waits_on(supervisor: Supervisor, name: str) -> str:
    """A service not started yet, and what it waits for."""
    child = supervisor.children[name]
    what = _waits_for(child.kind, child.env)
    return f"{name} (waiting for {what})" if what else name


def serve_forever(
    settings: Settings,
    redis_url: str | None,
    generators: int,
    console: Console,
    data_dir: Path | None,
    fsync: str = "everysec",
) -> int:
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with up(
        settings, redis_url, generators, console=console, data_dir=data_dir or default_data_dir(), fsync=fsync
    ):
        console.print("running; Ctrl-C stops every service")
        while not stop:
            time.sleep(0.2)
    console.print("stopped")
    return 0
