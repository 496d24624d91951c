"""The chaos run's out-of-memory fault: Redis's `maxmemory` set far below what it holds for a
while, with questions in flight (every write refused: `OOM command not allowed when used
memory > 'maxmemory'`), then set back. While it lasts the ingress is asked for a new question
and for /ready: both must be refused with 503 and Retry-After, the reason naming memory —
never 500, never a 202 for a question Redis could not keep. (Every question accepted before
must still be answered: the run's own checks.)"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

from spex.bench.chaos.rig import Rig

__all__ = ["out_of_memory"]

PROBE = {"question": "What is 2+2? (asked while Redis is out of memory)"}


async def out_of_memory(rig: Rig, duration_s: float, refused: list[str], wrong: list[str]) -> None:
    """Fill Redis for `duration_s`, probing the ingress once it is full: what it refused as
    it should is added to `refused`, what it answered wrongly to `wrong`."""
    started = time.monotonic()
    await asyncio.to_thread(rig.fill_redis)
    try:
        if rig.http_port:
            right, bad = await asyncio.to_thread(_probe, rig.http_port)
            refused += right
            wrong += bad
        await asyncio.sleep(max(0.0, started + duration_s - time.monotonic()))
    finally:
        await asyncio.to_thread(rig.free_redis)


def _probe(port: int) -> tuple[list[str], list[str]]:
    """What the ingress answered to a new question and to /ready: (as it should, wrongly). An
    ingress another fault has down or cut off answers nothing, or 503 "unreachable": neither."""
    right, wrong = [], []
    for method, path, body in (("POST", "/v1/questions", PROBE), ("GET", "/ready", None)):
        try:
            status, retry_after, error = _call(method, f"http://127.0.0.1:{port}{path}", body)
        except OSError:  # killed or stalled by another fault just now
            continue
        if status == 503 and "unreachable" in error:  # partitioned by another fault
            continue
        named = "memory" in error.lower()  # Redis refusing the write, or the ingress refusing first
        said = f"{method} {path} while Redis was out of memory: {status} {error!r}"
        if status != 503 or not named or (method == "POST" and not retry_after):
            wrong.append(said)
        else:
            right.append(said)
    return right, wrong


def _call(method: str, url: str, body: object) -> tuple[int, str | None, str]:
    """(status, Retry-After, the error's text) of one HTTP request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers.get("Retry-After"), ""
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            error = str(json.loads(text).get("error", text))
        except (ValueError, AttributeError):
            error = text
        return exc.code, exc.headers.get("Retry-After"), error
