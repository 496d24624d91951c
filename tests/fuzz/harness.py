"""What the fuzz tests share: an event loop in a thread (the services run on it while
hypothesis drives them from the test's thread), and the count of cases each test ran."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["CASES", "NOTES", "Loop", "count"]

T = TypeVar("T")

# test name -> examples (hypothesis cases) and entries (fuzzed messages) it ran; the fuzz
# conftest prints them at the end of the session.
CASES: dict[str, Counter[str]] = {}
NOTES: dict[str, str] = {}  # test name -> one line more for the summary (what the fuzzing reached)


def count(test: str, examples: int = 0, entries: int = 0) -> None:
    c = CASES.setdefault(test, Counter())
    c["examples"] += examples
    c["entries"] += entries


class Loop:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        """Run `coro` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        async def _cancel_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        self.run(_cancel_rest(), timeout_s=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
