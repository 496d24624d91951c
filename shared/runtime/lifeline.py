"""Children that die with their parent.

A supervisor (`spex up`, the chaos rig) holds the write end of a pipe that only it has; each
service it starts gets the read end (`SPEX_LIFELINE_FD`) and watches it in a thread. When the
supervisor dies, however it dies (SIGKILL included), the kernel closes its end, the read
returns end-of-file, and the service stops itself as if sent SIGTERM (then exits outright if
it has not within `GRACE_S`). A server that cannot watch a pipe (Redis) is started with
Linux's parent-death signal instead (`die_with_parent`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import cast

__all__ = ["ENV", "GRACE_S", "Lifeline", "die_with_parent", "watch_lifeline"]

ENV = "SPEX_LIFELINE_FD"
GRACE_S = 10.0  # a service told to stop by its lifeline exits outright after this long
PR_SET_PDEATHSIG = 1


class Lifeline:
    """The pipe: `fd` goes to each child (`pass_fds`); the write end stays here, unshared."""

    def __init__(self) -> None:
        self.fd, keep = os.pipe()  # neither is inherited unless passed explicitly
        self._fds: tuple[int, ...] = (self.fd, keep)

    def env(self) -> dict[str, str]:
        return {ENV: str(self.fd)}

    def close(self) -> None:
        """Once: a second close could close whatever file took the numbers since."""
        fds, self._fds = self._fds, ()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def watch_lifeline(environ: MutableMapping[str, str] | None = None) -> bool:
    """In a service: if started with a lifeline, stop (SIGTERM to ourselves) once it breaks.
    Returns whether there was one to watch."""
    env = environ if environ is not None else os.environ
    raw = env.pop(ENV, "")  # ours only: a process we start does not inherit the number
    if not raw.isdigit():
        return False
    fd = int(raw)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False  # not a pipe: an environment copied from a supervisor, not started by it
    except OSError:
        return False

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        print(f"spex: the supervisor is gone (lifeline {fd} closed); stopping", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(GRACE_S)
        os._exit(1)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
    return True


def _prctl() -> Callable[..., int] | None:
    try:
        return cast(Callable[..., int], ctypes.CDLL(None, use_errno=True).prctl)
    except (OSError, AttributeError):  # not Linux
        return None


_PRCTL = _prctl()  # looked up here, in the parent: a forked child must not load libraries


def die_with_parent() -> None:
    """A `preexec_fn`: the child gets SIGTERM when the thread that started it dies (Linux; a
    no-op elsewhere). Start such children from a thread that lives as long as they should."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
