"""Decode speed of a live server by batch × context, what `spex profile --engine vllm|sglang`
measures, and the report every profile writes (`write_report`; the in-process engine's cells
are measured by `hf_profile`).

A cell is `batch` requests at once, each with its own prompt of `context` tokens, and its
figure the decode rate: `batch` over the mean time per output token after the first (TPOT).
Each cell is run `repeats` times; the median is reported.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from spex.shared.content.prompts import filler
from spex.shared.engine.api import Completion, EngineRequest
from spex.shared.roofline.measured import Cell, profile_json
from spex.shared.serving.backend import EngineUnavailable
from spex.shared.serving.engine import ServingEngine

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Cell", "measure_server", "plot_cells", "write_report"]

START_WAIT_S = 60.0  # how long a server that does not answer is waited for
# The request-cost probe's prompt: two of vLLM's 128-token blocks and a few tokens more (a
# block cache recomputes only those; SGLang's radix cache only the last one).
PROBE_CONTEXT = 260


def measure_server(
    engine: ServingEngine,
    batches: list[int],
    contexts: list[int],
    new_tokens: int = 32,
    repeats: int = 3,
    probe: bool = True,
) -> tuple[list[Cell], dict[str, float]]:
    """Each batch × context cell on a live server (vLLM, SGLang), started. Its replies are not
    streamed, so a cell's time per output token is the difference of two runs: `batch` requests
    making `new_tokens` and `batch` others making one, each over their own fresh prompts (no
    prefix-cache hit: both pay the same prefill), that difference over `new_tokens - 1`.

    Then, with `probe`, the request-cost probe (the report's `meta.request_probe`; else {}):
    the time of a one-token request whose prompt of about `PROBE_CONTEXT` tokens is cached but
    for a few: a request's own cost (the API server's work), one forward pass and those few
    tokens' prefill, from which `roofline.measured` takes the cost a request adds beside its
    steps."""
    return asyncio.run(_measure_server(engine, batches, contexts, new_tokens, repeats, probe))


async def _measure_server(
    engine: ServingEngine, batches: list[int], contexts: list[int], new_tokens: int, repeats: int, probe: bool
) -> tuple[list[Cell], dict[str, float]]:
    try:  # a server that is not there is said in a minute, not the requests' timeout
        await engine.start(wait_s=START_WAIT_S)
    except BaseException:
        await engine.close()
        raise
    done: dict[str, Completion] = {}
    arrived = asyncio.Event()

    async def on_complete(c: Completion) -> None:
        done[c.rid] = c
        arrived.set()

    stop = asyncio.Event()
    runner = asyncio.create_task(engine.run(on_complete, stop))
    try:
        per_word = await _tokens_per_word(engine, done, arrived)

        async def batch_s(tag: str, batch: int, context: int, tokens: int) -> float:
            rids = [f"{tag}/{i}" for i in range(batch)]
            for i, rid in enumerate(rids):
                words = " ".join(filler(max(1, round(context / per_word))))
                req = EngineRequest(rid, ((rid, context),), rid, tokens, tokens, seed=i, temperature=0.0)
                req.text = (f"{rid} {words}",)
                engine.submit(req)
            await _until_done(rids, done, arrived)
            failed = [done[r].text for r in rids if done[r].reason != "finished"]
            if failed:
                raise EngineUnavailable(
                    f"{engine.backend.name} at {engine.url} failed cell {tag}: {failed[0]}"
                )
            return statistics.fmean([_e2e(done.pop(r)) for r in rids])

        async def cached_s(context: int, repeats: int) -> dict[str, float]:
            """One-token requests of one prompt, one after another: each finds it cached but
            for its last few tokens (`uncached`), so its time is the request's own cost, one
            forward pass and those tokens' prefill (the median over all but the first, which
            filled the cache)."""
            words = " ".join(filler(max(1, round(context / per_word))))
            times, last = [], None
            for r in range(repeats + 1):
                rid = f"{engine.nonce}/cached/{r}"
                req = EngineRequest(rid, (("cached", context),), rid, 1, 1, temperature=0.0)
                req.text = (f"cached {words}",)
                engine.submit(req)
                await _until_done([rid], done, arrived)
                last = done.pop(rid)
                if last.reason != "finished":
                    raise EngineUnavailable(
                        f"{engine.backend.name} at {engine.url} failed the probe: {last.text}"
                    )
                times.append(_e2e(last))
            assert last is not None
            uncached = last.prompt_tokens - last.cached_tokens
            return {
                "context": last.prompt_tokens,
                "uncached": uncached,
                "e2e_s": statistics.median(times[1:]),
            }

        cells = []
        await batch_s(f"{engine.nonce}/warm", batches[0], contexts[0], new_tokens)  # as hf_profile's
        for context in contexts:
            for batch in batches:
                runs, firsts = [], []
                for r in range(repeats):
                    tag = f"{engine.nonce}/{batch}x{context}/{r}"
                    long = await batch_s(f"{tag}/n", batch, context, new_tokens)
                    short = await batch_s(f"{tag}/1", batch, context, 1)
                    runs.append(max(long - short, 1e-6) / (new_tokens - 1))
                    firsts.append(short)
                tpot = statistics.median(runs)
                cells.append(Cell(batch, context, tpot, batch / tpot, statistics.median(firsts)))
        return cells, (await cached_s(PROBE_CONTEXT, max(3, repeats)) if probe else {})
    finally:
        stop.set()
        await runner


async def _until_done(rids: list[str], done: dict[str, Completion], arrived: asyncio.Event) -> None:
    """Wait until every one of `rids` has come back into `done` (set `arrived` on each)."""
    while not all(r in done for r in rids):
        arrived.clear()
        await arrived.wait()


def _e2e(c: Completion) -> float:
    return c.time_s - c.arrival_s


async def _tokens_per_word(
    engine: ServingEngine, done: dict[str, Completion], arrived: asyncio.Event
) -> float:
    """How many of the server's tokens a prompt word `wN` takes (from a probe's usage)."""
    words = 200
    rid = f"{engine.nonce}/probe"
    req = EngineRequest(rid, ((rid, words),), rid, 1, 1, temperature=0.0)
    req.text = (" ".join(filler(words)),)
    engine.submit(req)
    await _until_done([rid], done, arrived)
    c = done.pop(rid)
    if c.reason != "finished" or c.prompt_tokens <= 0:
        raise EngineUnavailable(
            f"{engine.backend.name} at {engine.url}: the probe failed ({c.text or 'no prompt tokens'})"
        )
    return c.prompt_tokens / words


def write_report(cells: list[Cell], meta: dict[str, object], path: Path, plot: bool = True) -> None:
    """The cells as JSON at `path`, and (with `plot`) a plot of tokens/s by batch beside it (.png)."""
    path.write_text(profile_json(cells, meta))
    if plot:
        plot_cells(cells, str(meta.get("engine", "")), path.with_suffix(".png"))


def plot_cells(cells: list[Cell], title: str, path: Path, ax: Axes | None = None) -> None:
    """Decode tokens/s by batch, a line per context: into `ax`, or a figure of its own at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 4))
    for context in sorted({c.context for c in cells}):
        mine = [c for c in cells if c.context == context]
        ax.plot(
            [c.batch for c in mine], [c.tokens_per_s for c in mine], marker="o", label=f"context {context}"
        )
    ax.set_xlabel("batch")
    ax.set_ylabel("decode tokens/s")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    if fig is not None:
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
