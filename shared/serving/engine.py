"""A serving engine over HTTP (vLLM or SGLang), a `LiveEngine` (`spex.shared.engine.live`)
like the other engines a service runs (`spex.shared.sim.realtime`, `spex.shared.hf.threaded`).

Each request is one HTTP call in its own task; what it returns becomes a `Completion`.
A backend (`spex.shared.serving.vllm`, `spex.shared.serving.sglang`) says how a request is
written and a reply read; this module owns what they share:

- **Request ids.** The server sees a fixed-length id (`server_rid`): 32 hex digits of a hash of
  this engine's random nonce and the job id. SGLang aborts every request whose id *starts
  with* the one given, so no id may prefix another; fixed length guarantees it, and the nonce
  keeps a restarted worker's ids apart from those its predecessor left running.
- **Retries** only where no work can be duplicated: a connection that was never made (the
  server is starting or restarting) is retried with backoff until the request's timeout. A
  connection lost after the request was sent is not retried: the server may be running it,
  so it is aborted and the job fails (the generator dead-letters it, the query hears).
- **Aborts.** `abort` asks the server to stop the request; the reply then comes back with
  what was generated, reported as `reason="abort"`. A request still waiting to connect is
  simply dropped. The abort is repeated until the call ends: vLLM and SGLang drop an abort
  for an id they have not registered yet (a request still being read or tokenized), and the
  request would then run to its end. Where a server has no abort call (vLLM's pooling API),
  the request's connection is closed, which the server takes as an abort, and it ends at once.
- **Load.** Counted here (what this worker has in flight, primary and speculative) and read
  from the server's `/metrics` every `poll_s` (running and waiting requests, KV usage,
  prefix-cache hits) — what the allocator budgets this worker by — with the TPOT governor's
  measure of primary requests (`inflight.PrimaryTpot`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from spex.proto.messages import PRIMARY
from spex.shared.content.prompts import Template, plain_template
from spex.shared.engine.api import Completion, EngineLoad, EngineRequest
from spex.shared.engine.live import OnComplete
from spex.shared.roofline.measured import MeasuredProfile
from spex.shared.serving.backend import Backend, EngineUnavailable, Reply, ServerMetrics
from spex.shared.serving.inflight import InFlight, PrimaryTpot

__all__ = ["ServingEngine", "server_rid"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
# A request's own time limit, scaled to what it asks: a minute, a second a token on top (a slow
# CPU server decodes a few tokens a second per sequence) and 20 ms a prompt token (it prefills
# ~2 ms a token, and a batch of long prompts queues behind one another), never past `timeout_s`.
REQUEST_FLOOR_S = 60.0
REQUEST_S_PER_TOKEN = 1.0
REQUEST_S_PER_PROMPT_TOKEN = 0.02
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0
CHECK_TIMEOUT_S = 30.0
ABORT_REPEAT_S = 0.1  # an abort not yet answered by the call ending is sent again (doubling)


def server_rid(nonce: str, job_id: str) -> str:
    """A request id of fixed length (32 hex digits), so no id is a prefix of another."""
    return hashlib.blake2b(f"{nonce}\x00{job_id}".encode(), digest_size=16).hexdigest()


class ServingEngine:
    time_scale = 1.0  # its clock is the wall clock

    def __init__(
        self,
        backend: Backend,
        url: str,
        timeout_s: float = 600.0,
        template: Template = plain_template,
        poll_s: float = 0.5,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.backend = backend
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.wait_s = timeout_s  # how long `start` waits for the server (a generator: SPEX_ENGINE_WAIT_S)
        self.template = template
        # The served model's token count of a text, where its tokenizer is known (open_engine).
        self.count_tokens = count_tokens
        self.poll_s = poll_s
        self.nonce = os.urandom(8).hex()
        self.server = ServerMetrics()
        self.epoch_s = time.monotonic()  # the zero of `now` (a driver may share its own)
        self._session: aiohttp.ClientSession | None = None
        self._inflight: dict[str, InFlight] = {}
        self._done: asyncio.Queue[Completion] = asyncio.Queue()
        self.healthy = True  # False while the server cannot be connected to
        self._stopping: set[asyncio.Task[None]] = set()  # abort tasks (held: the loop keeps weak refs)
        # The TPOT governor's measure on a server (no view of its steps), by a measured step
        # curve where one is set (`inflight.PrimaryTpot`).
        self.step_model: MeasuredProfile | None = None
        self.tpot = PrimaryTpot()

    # ------------------------------------------------------------------ the driver interface
    def now(self) -> float:
        return time.monotonic() - self.epoch_s

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S)
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session

    async def start(self, wait_s: float | None = None) -> None:
        """Wait (up to `wait_s`, default `self.wait_s`) for the server to answer, then check it
        can serve this configuration: raises EngineUnavailable otherwise."""
        wait_s = self.wait_s if wait_s is None else wait_s
        deadline = time.monotonic() + wait_s
        delay = RETRY_FIRST_S
        while True:
            try:  # a server that accepts connections but never answers counts as not there
                await asyncio.wait_for(self.backend.check(self.session), CHECK_TIMEOUT_S)
                self.healthy = True
                return
            except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                if time.monotonic() + delay > deadline:
                    raise EngineUnavailable(
                        f"{self.backend.name} at {self.url}: not reachable within {wait_s:.0f} s ({exc})"
                    ) from None
                log.info("waiting for %s at %s: %s", self.backend.name, self.url, exc)
                await asyncio.sleep(delay)
                delay = min(2 * delay, RETRY_MAX_S)

    def submit(self, request: EngineRequest) -> None:
        old = self._inflight.get(request.rid)
        if old is not None and not old.aborted:
            raise ValueError(f"duplicate request id {request.rid!r}")
        # An aborted one still waiting for its reply is replaced (the job came back to this
        # worker): its reply, when it comes, is dropped by `_finish`.
        if not request.text:
            raise ValueError(f"request {request.rid!r}: a serving engine needs the prompt's text")
        f = InFlight(request, server_rid(self.nonce, request.rid), self.now())
        if request.priority > PRIMARY:
            for other in self._inflight.values():
                other.beside_spec = True
            f.beside_spec = True
        else:
            f.beside_spec = any(o.req.priority > PRIMARY for o in self._inflight.values())
        self._inflight[request.rid] = f
        f.task = asyncio.get_running_loop().create_task(self._call(f))

    def abort(self, rid: str) -> list[Completion]:
        f = self._inflight.get(rid)
        if f is None or f.aborted:
            return []
        f.aborted = True
        # Never reached the server (nothing to stop there), or a server that stops a request
        # when its connection closes: cancelling the call is the abort.
        if f.task is not None and (not f.sent or self.backend.abort(f.rid) is None):
            f.task.cancel()
            del self._inflight[rid]
            return [self._completion(f, Reply("", 0, 0, 0, "abort"))]
        task = asyncio.get_running_loop().create_task(self._stop(f))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        return []  # the reply comes back with what was generated

    def promote(self, rid: str, priority: int = PRIMARY) -> None:
        """vLLM and SGLang read a request's priority when it arrives and offer no call that
        changes it later: a request still connecting goes with the new priority; one the server
        has keeps its place there and counts as primary in this worker's load from now on."""
        f = self._inflight.get(rid)
        if f is None or f.aborted or f.req.priority <= priority:
            return
        f.req.priority = priority
        f.promoted = True

    @property
    def waiting(self) -> int:
        """Requests the server holds queued (from its last /metrics)."""
        return self.server.waiting

    def load(self) -> EngineLoad:
        primary = [f for f in self._inflight.values() if f.req.priority <= PRIMARY]
        return EngineLoad(
            primary=len(primary),
            primary_ctx=sum(sum(t for _, t in f.req.prompt) for f in primary),
            spec=len(self._inflight) - len(primary),
            running=self.server.running,
            waiting=self.server.waiting,
            kv_held=int(self.server.kv_usage * self.server.kv_capacity),
            kv_capacity=self.server.kv_capacity,
            prefix_cache_hit_rate=self.server.prefix_cache_hit_rate,
            prompt_tokens=int(self.server.prefix_queries),
            cached_tokens=int(self.server.prefix_hits),
            primary_steps=self.tpot.tokens,
            primary_step_s=self.tpot.step_s,
            primary_alone_s=self.tpot.alone_s,
        )

    async def run(self, on_complete: OnComplete, stop: asyncio.Event) -> None:
        """Report completions as they come and poll the server's metrics, until `stop`."""
        poller = asyncio.get_running_loop().create_task(self._poll_forever(stop))
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    completion = await asyncio.wait_for(self._done.get(), timeout=self.poll_s)
                    await on_complete(completion)
        finally:
            poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)
            await self.close()

    async def _poll_forever(self, stop: asyncio.Event) -> None:
        """Apart from the completions: a slow /metrics never holds them up."""
        while not stop.is_set():
            await self._poll()
            await asyncio.sleep(self.poll_s)

    async def close(self) -> None:
        tasks = [f.task for f in self._inflight.values() if f.task is not None] + list(self._stopping)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------------ one request
    def request_timeout_s(self, req: EngineRequest) -> float:
        """How long one request may take: scaled to its tokens, capped by `timeout_s`."""
        prompt = sum(tokens for _, tokens in req.prompt)
        return min(
            self.timeout_s,
            REQUEST_FLOOR_S + REQUEST_S_PER_TOKEN * req.max_new_tokens + REQUEST_S_PER_PROMPT_TOKEN * prompt,
        )

    async def _call(self, f: InFlight) -> None:
        limit_s = self.request_timeout_s(f.req)  # once it reached the server
        unreachable_until = time.monotonic() + self.timeout_s  # a server (re)starting, loading weights
        delay = RETRY_FIRST_S
        try:
            while True:
                path, body = self.backend.generate(f.req, f.rid)  # with a priority raised meanwhile
                f.sent = True  # from here the server may have it, unless the connection fails
                try:
                    deadline = time.monotonic() + limit_s
                    reply = self.backend.read(f.req, await self._post(path, body, deadline))
                    self.healthy = True
                    break
                except aiohttp.ClientConnectorError as exc:  # never connected: safe to retry
                    f.sent = False
                    self.healthy = False
                    if f.aborted:  # stopped while it could not connect: nothing to stop there
                        self._finish(f, Reply("", 0, 0, 0, "abort"), "")
                        return
                    if time.monotonic() + delay > unreachable_until:
                        raise EngineUnavailable(f"{self.backend.name} not reachable: {exc}") from None
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, RETRY_MAX_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure fails this request, not the worker
            if f.aborted:  # we stopped it; how the server ended the call does not matter
                self._finish(f, Reply("", 0, 0, 0, "abort"), "")
                return
            if f.sent:  # it may still be running there: stop it before giving up on it
                await self._abort(f)
            if isinstance(exc, TimeoutError):
                reason = (
                    f"{self.backend.name} at {_no_credentials(self.url)}: no reply within {limit_s:g} s for "
                    f"{f.req.max_new_tokens} tokens after a prompt of {sum(t for _, t in f.req.prompt)} "
                    f"(SPEX_ENGINE_TIMEOUT_S caps it at {self.timeout_s:g} s)"
                )
            else:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self._finish(f, None, reason)
            return
        self._finish(f, reply, "")

    async def _post(self, path: str, body: dict[str, object], deadline: float) -> dict[str, object]:
        timeout = aiohttp.ClientTimeout(
            total=max(0.001, deadline - time.monotonic()), sock_connect=CONNECT_TIMEOUT_S
        )
        async with self.session.post(self.url + path, json=body, timeout=timeout) as resp:
            if resp.status != 200:
                text = (await resp.text())[:300].replace("\n", " ")
                raise EngineUnavailable(f"{self.backend.name} answered {resp.status}: {text}")
            data: dict[str, object] = await resp.json(content_type=None)
        return data

    async def _stop(self, f: InFlight) -> None:
        """Abort `f` until its call ends: an abort that reaches the server before the request
        is registered there is dropped (measured on vLLM: aborts sent up to ~50 ms after the
        request were lost and it ran all its tokens)."""
        assert f.task is not None
        delay = ABORT_REPEAT_S
        while not f.task.done():
            await self._abort(f)
            await asyncio.wait({f.task}, timeout=delay)
            delay = min(2 * delay, RETRY_MAX_S)

    async def _abort(self, f: InFlight) -> None:
        call = self.backend.abort(f.rid)
        if call is None:  # the failed call's connection is closed: the server stops it
            return
        path, body = call
        try:
            timeout = aiohttp.ClientTimeout(total=CONNECT_TIMEOUT_S)
            async with self.session.post(self.url + path, json=body, timeout=timeout) as resp:
                if resp.status >= 400:
                    log.warning(
                        "abort of %s refused: %s %s", f.req.rid, resp.status, (await resp.text())[:200]
                    )
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("abort of %s failed: %r", f.req.rid, exc)

    def _finish(self, f: InFlight, reply: Reply | None, error: str) -> None:
        if self._inflight.get(f.req.rid) is not f:
            return  # already reported (aborted before it was sent)
        del self._inflight[f.req.rid]
        if reply is not None and reply.finish == "abort" and not f.aborted:
            # The server stopped it on its own (an operator's abort-all, a scheduler abort):
            # a failure of the job, so its query hears — not a cancellation nobody asked for.
            reply, error = None, f"{self.backend.name} aborted the request"
        if reply is None:
            c = Completion(
                f.req.rid, self.now(), 0, 0, 0, "error", f.arrival_s, None, f.req.priority, text=error
            )
        else:
            c = self._completion(f, reply)
            if c.reason == "finished" and f.req.priority <= PRIMARY and not f.promoted and c.generated > 1:
                self.tpot.finished(f, c, self.step_model)
        self._done.put_nowait(c)

    def _completion(self, f: InFlight, reply: Reply) -> Completion:
        aborted = f.aborted
        logprobs = reply.logprobs
        return Completion(
            rid=f.req.rid,
            time_s=self.now(),
            generated=reply.generated,
            prompt_tokens=reply.prompt_tokens,
            cached_tokens=reply.cached_tokens,
            reason="abort" if aborted else "finished",
            arrival_s=f.arrival_s,
            first_token_s=None,  # not streamed: the first token's time is the server's to know
            priority=f.req.priority,
            text=reply.text,
            stop_reason="" if aborted or reply.finish == "abort" else reply.finish,
            logprob_mean=sum(logprobs) / len(logprobs) if logprobs else 0.0,
            logprob_min=min(logprobs) if logprobs else 0.0,
            reward=reply.reward,
        )

    async def _poll(self) -> None:
        try:
            self.server = await self.backend.metrics(self.session)
            self.healthy = True
            self.tpot.sample(self._inflight.values(), self.server, self.step_model)
        except aiohttp.ClientConnectorError as exc:  # the server is gone (or restarting)
            self.healthy = False
            log.debug("metrics of %s unavailable: %r", self.url, exc)
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            log.debug("metrics of %s unavailable: %r", self.url, exc)


def _no_credentials(url: str) -> str:
    """`url` without a user or password in it: a job's failure reason reaches its client."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
