"""Whoever runs the services through `up` with a console (`spex up`, `spex bench --distributed`)
is told when the supervisor restarts one. Real service processes."""

import io
import os
import signal
import time
from pathlib import Path

from rich.console import Console

from spex.services.launcher import up
from spex.shared.runtime.redis_server import free_port
from spex.shared.runtime.settings import Settings


def child_running(module):
    """The pid of this process's child running `python -m module`."""
    me = os.getpid()
    for task in Path(f"/proc/{me}/task").glob("*"):
        for pid in (task / "children").read_text().split():
            if module in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                return int(pid)
    raise AssertionError(f"no child runs {module}")


def test_a_restarted_service_is_reported_on_the_console():
    out = io.StringIO()
    console = Console(file=out, width=200)
    with up(Settings(http_port=free_port()), generators=1, console=console):
        os.kill(child_running("spex.services.scorer"), signal.SIGKILL)
        deadline = time.monotonic() + 20
        while "scorer-0 restarted" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.1)
    said = out.getvalue()
    assert "scorer-0 exited (status -9); restarting in 0.5 s" in said
    assert "scorer-0 restarted (restart 1)" in said
