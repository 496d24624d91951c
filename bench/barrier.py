"""The reward barrier as the paper measures it, read from a running stack: the generator's
batch over time and the share of time it waits on rewards.

The generator already records what this needs: every 50 ms (`LOAD_REPORT_S`) it writes its
load (`WorkerLoadEvent`: the jobs it holds, the rows its engine decodes, primaries and
speculative ones, its primary step time) to its load key. `BarrierTrace` polls that key and
the scorer's pending score jobs (`XINFO GROUPS` on the score stream) from a thread, and
`barrier_share` reads the samples of one run: the generator waits on rewards while it holds no
job and the scorer holds some; it waits on everything else (the coordinator, the bus) while
neither holds any.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, cast

import redis
import redis.asyncio as aioredis

from spex.proto.names import SCORE_JOBS, SCORER_GROUP, Partitions
from spex.proto.text import as_str
from spex.shared.runtime.replies import GroupInfo
from spex.shared.runtime.settings import Settings
from spex.shared.runtime.workers import WorkerRegistry

__all__ = ["FIELDS", "BarrierTrace", "barrier_share", "plot_barrier"]

# One sample: the driver's clock (time.monotonic, the machine's CLOCK_MONOTONIC as the
# generator's), then the generator's latest load and the scorer's pending score jobs.
FIELDS = ("t_s", "jobs", "running", "primary", "spec", "scorer_pending", "primary_step_s", "primary_alone_s")


class BarrierTrace:
    """Samples the generator's load and the scorer's pending jobs every `every_s` until stopped."""

    def __init__(self, live: Settings, every_s: float) -> None:
        self.every_s = every_s
        self.rows: list[tuple[float, ...]] = []
        self._live = live
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="barrier-trace", daemon=True)

    def __enter__(self) -> BarrierTrace:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        asyncio.run(self._poll())

    async def _poll(self) -> None:
        client = aioredis.Redis.from_url(self._live.redis_url, password=self._live.password() or None)
        registry = WorkerRegistry(client, Partitions(self._live.partitions))
        try:
            while not self._stop.is_set():
                row = await self._sample(client, registry)
                if row is not None:
                    self.rows.append(row)
                await asyncio.sleep(self.every_s)
        finally:
            await client.aclose()

    async def _sample(self, client: aioredis.Redis, registry: WorkerRegistry) -> tuple[float, ...] | None:
        load = next(iter((await registry.live()).values()), None)  # the generator (the run has one)
        if load is None:
            return None
        pending = 0
        try:
            groups = cast(list[GroupInfo], await client.xinfo_groups(SCORE_JOBS))
        except redis.ResponseError:  # no score job yet: no stream
            groups = []
        for group in groups:
            name = as_str(group["name"])
            if name == SCORER_GROUP:
                pending = int(group["pending"])
        return (
            time.monotonic(), float(load.jobs), float(load.running), float(load.primary), float(load.spec),
            float(pending), load.primary_step_s, load.primary_alone_s,
        )  # fmt: skip


def barrier_share(rows: list[tuple[float, ...]], t0: float, t1: float) -> dict[str, float]:
    """Of the samples in [t0, t1]: the generator's mean batch (rows decoding), and the shares of
    time it held no job while the scorer held some (waiting on rewards) and while neither did
    (waiting on the rest); primary TPOT × as the generator's own counterfactual gives it (its
    primary step time over the same steps without speculative rows, by the measured curve)."""
    span = [r for r in rows if t0 <= r[0] <= t1]
    if not span:
        return {"samples": 0}
    n = len(span)
    idle = [r for r in span if r[1] == 0]
    out = {
        "samples": float(n),
        "mean_batch": sum(r[2] for r in span) / n,
        "busy_mean_batch": _mean([r[2] for r in span if r[1] > 0]),
        "reward_wait_share": sum(1 for r in idle if r[5] > 0) / n,
        "other_wait_share": sum(1 for r in idle if r[5] == 0) / n,
        "mean_scorer_pending": sum(r[5] for r in span) / n,
    }
    step_s, alone_s = span[-1][6] - span[0][6], span[-1][7] - span[0][7]
    if alone_s > 0:
        out["primary_tpot_ratio"] = step_s / alone_s
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def plot_barrier(traces: dict[str, dict[str, Any]], path: Path, where: str) -> None:
    """Per cell, the generator's batch over time (rows decoding) with the spans it waits on
    rewards shaded, baseline above SPEX."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(traces)
    fig, axes = plt.subplots(2, max(1, len(cells)), figsize=(max(7.0, 4.2 * len(cells)), 5.5), squeeze=False)
    for col, cell in enumerate(cells):
        for row, mode in enumerate(("baseline", "spex")):
            ax = axes[row][col]
            trace = traces[cell].get(mode)
            if not trace:
                ax.set_axis_off()
                continue
            t0 = trace["t0"]
            rows = [r for r in trace["rows"] if trace["t0"] <= r[0] <= trace["t1"]]
            ts = [r[0] - t0 for r in rows]
            ax.step(
                ts, [r[2] for r in rows], where="post", color="C0" if mode == "baseline" else "C1", lw=0.9
            )
            waiting = [r[1] == 0 and r[5] > 0 for r in rows]
            ax.fill_between(ts, 0, 1, where=waiting, step="post", color="C3", alpha=0.25,
                            transform=ax.get_xaxis_transform(), label="waiting on rewards")  # fmt: skip
            share = trace["share"].get("reward_wait_share", 0.0)
            ax.set_title(f"{cell} {mode}: waits on rewards {share:.0%}", fontsize=8)
            ax.set_xlabel("s", fontsize=8)
            if col == 0:
                ax.set_ylabel("generator batch (rows)", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.suptitle(f"The reward barrier on {where}: the generator's batch over time", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
