"""A service loop retries what fails, but not forever: after MAX_CONSECUTIVE_FAILURES failures
in a row that are not Redis's reachability it raises, so the service exits with status 1 and
its supervisor restarts it. Redis being away is waited out however long it takes, and a
success resets the count."""

import asyncio

import pytest
import structlog
from redis.exceptions import ConnectionError as RedisConnectionError

from spex.shared.runtime import service
from spex.shared.runtime.service import LoopFailed, loop_forever

LOG = structlog.get_logger()


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    real_sleep = asyncio.sleep

    async def instant(_s: float) -> None:
        await real_sleep(0)

    monkeypatch.setattr(service.asyncio, "sleep", instant)


def run(outcomes: list[BaseException | None], max_failures: int = 3) -> tuple[int, BaseException | None]:
    """Drive `loop_forever` over a body that raises each of `outcomes` in turn (None: succeeds)
    and stops when they run out: (bodies run, what loop_forever raised)."""
    calls = 0
    stop = asyncio.Event()

    async def body() -> None:
        nonlocal calls
        calls += 1
        if calls >= len(outcomes):
            stop.set()
        outcome = outcomes[calls - 1]
        if outcome is not None:
            raise outcome

    async def main() -> BaseException | None:
        try:
            await loop_forever(stop, body, LOG, lambda: None, max_failures=max_failures)
        except LoopFailed as exc:
            return exc
        return None

    raised = asyncio.run(main())
    return calls, raised


def test_a_loop_that_keeps_failing_gives_up_with_the_last_error():
    calls, raised = run([ValueError("bad"), KeyError("k"), RuntimeError("still bad"), None, None])
    assert calls == 3
    assert isinstance(raised, LoopFailed) and "3 failures in a row" in str(raised)
    assert "still bad" in str(raised) and isinstance(raised.__cause__, RuntimeError)


def test_a_success_resets_the_count():
    boom = ValueError("bad")
    calls, raised = run([boom, boom, None, boom, boom, None, boom, boom, None])
    assert (calls, raised) == (9, None)


def test_redis_being_away_is_waited_out_however_long():
    away = RedisConnectionError("Connection refused")
    calls, raised = run([away] * 20 + [None])
    assert (calls, raised) == (21, None)


def test_the_default_limit_is_what_the_services_use():
    assert service.MAX_CONSECUTIVE_FAILURES == 10
    calls, raised = run([ValueError("x")] * 12, max_failures=service.MAX_CONSECUTIVE_FAILURES)
    assert calls == 10 and isinstance(raised, LoopFailed)
