"""What `spex up` checks before it starts anything: an operator's mistake is one line naming the
flag and its fix at once, not a service's log line after every other service has started (a
model directory is only read by a generator seconds in; a port taken by another exporter
silently costs a service its metrics)."""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path

from spex.cli.client import check_password_file
from spex.cli.transport import check_redis_url
from spex.shared.runtime.settings import Settings

__all__ = ["check_up"]


def check_up(args: argparse.Namespace, settings: Settings, services: int, data_dir: Path | None) -> None:
    """ValueError naming the flag for the first thing `spex up` would fail on: its Redis URL
    and password file, the model directory, the reward model's directory and family, its data
    directory (made here, as the launcher
    makes it, if it is missing; not another `spex up`'s), the ports of its `services`."""
    if args.redis is not None:
        check_redis_url(args.redis)
    check_password_file(args.redis_password_file)
    if settings.engine == "hf" and settings.model:
        _model(settings.model, "--model" if args.model else "SPEX_MODEL")
    if settings.prm and not settings.prm_url:  # the reward model in process: of the family named
        _model(settings.prm, "--prm" if args.prm else "SPEX_PRM")
        _family(settings.prm, settings.prm_kind, "--prm-kind" if args.prm_kind else "SPEX_PRM_KIND")
    if data_dir is not None:  # first: another `spex up` on it holds the ports too
        _data_dir(data_dir, embedded=args.redis is None)
    _ports(settings, services)


def _model(path: str, flag: str) -> None:
    from spex.shared.hf.importing import model_dir_problem

    problem = model_dir_problem(path)
    if problem is not None:
        raise ValueError(f"{flag}: {problem}")


def _family(path: str, kind: str, flag: str) -> None:
    from spex.shared.hf.importing import prm_family_problem

    problem = prm_family_problem(path, kind)
    if problem is not None:
        raise ValueError(f"{flag}: {problem}")


def _ports(settings: Settings, services: int) -> None:
    host, port = settings.http_host, settings.http_port
    taken = _taken(host, port)
    if taken:
        raise ValueError(f"--port: cannot listen on {host}:{port} ({taken}): give a free port")
    first = settings.metrics_port
    if not first:
        return
    last = first + services - 1
    span = f"{first}-{last} (one per service)"
    if last > 65_535:
        raise ValueError(f"--metrics-port: its ports {span} run past 65535: give a lower one, or 0 for none")
    if first <= port <= last:
        raise ValueError(
            f"--metrics-port: its ports {span} include --port {port}: give another, or 0 for none"
        )
    for metrics in range(first, last + 1):
        taken = _taken(host, metrics)
        if taken:
            raise ValueError(
                f"--metrics-port: cannot listen on {host}:{metrics} ({taken}; another exporter?): "
                f"give a first port with {services} free in a row, or 0 for none"
            )


def _taken(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on (None: it can), binding as the services do (with
    SO_REUSEADDR, so a port in TIME_WAIT is free)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ValueError(f"--host: {host!r}: {exc.strerror}") from None
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _data_dir(path: Path, embedded: bool) -> None:
    """`path` can be made, and (for an embedded Redis, which locks it) no other `spex up` holds it."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        raise ValueError(f"--data-dir: {path} is a file, not a directory") from None
    except OSError as exc:
        raise ValueError(f"--data-dir: cannot make {path}: {exc.strerror}") from None
    if embedded:
        from spex.services.launcher import lock_data_dir

        os.close(lock_data_dir(path))  # the lock's own error names the `spex up` holding it
