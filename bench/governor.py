"""The TPOT governor over a run, plotted from a results file: its slack, the speculative jobs
admitted and what stopped admission there (the slack, the useful-rate test of the throughput
objective, the KV or batch limit, or the candidates running out), and the primary TPOT growth
it measured, against the target.

    python -m spex.bench.governor RESULTS.json --plot governor.png

RESULTS is `spex bench --mode compare` (with or without `--repeats`: each pair's SPEX run is
drawn) or a single SPEX run. The trace is worker 0's (`RunSummary.governor_trace`): a row
each time the slack or the pool moved, with the growth of the last window the governor
closed (every 32 primary decode steps) and how many it had closed.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from spex.bench.comparison import pair_records

__all__ = ["plot", "runs", "summary"]

BOUND_MARKERS = {"slack": "v", "rate": "x", "limit": "s", "demand": "."}  # what stopped admission


def runs(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The SPEX runs of a results file, in order (each pair's, or the one run)."""
    return [r.get("spex", r) for r in pair_records(report)]


def summary(run: dict[str, Any]) -> str:
    """One line: the target, the windows' growth (median, each traced window once), slack, pool."""
    trace = run.get("governor_trace") or []
    if not trace:
        raise ValueError("no governor trace recorded (a baseline, a fixed slack, or a file older than it)")
    growth = sorted({row[4]: row[3] for row in trace if row[3] is not None}.values())
    median = f"{growth[len(growth) // 2]:+.0%}" if growth else "—"
    pools = [row[2] for row in trace]
    target = run.get("tpot_target")
    bounds = Counter(str(row[5]) for row in trace if len(row) > 5)
    why = ", ".join(f"{k} {v}" for k, v in bounds.most_common())
    return (
        f"objective {run.get('objective', 'slo')}, bound by {why or 'unrecorded'}; "
        f"target {'none' if target is None else f'+{target:.0%}'}: window growth median {median}, "
        f"slack at the end {run['slack_end'][0]:.2f}, pool {min(pools, default=0)}–{max(pools, default=0)}, "
        f"primary TPOT {run['primary_tpot_ms']:.0f} ms"
    )


def plot(report: dict[str, Any], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, mid, low) = plt.subplots(3, 1, figsize=(7, 6.5), sharex=True)
    for i, run in enumerate(runs(report)):
        trace = run.get("governor_trace") or []
        if not trace:
            continue
        t = [row[0] for row in trace]
        label = f"run {i + 1}"
        top.step(t, [row[1] for row in trace], where="post", color=f"C{i}", label=label)
        mid.step(t, [row[2] for row in trace], where="post", color=f"C{i}")
        for bound, marker in BOUND_MARKERS.items():
            rows = [row for row in trace if len(row) > 5 and row[5] == bound]
            mid.plot([r[0] for r in rows], [r[2] for r in rows], marker, color=f"C{i}", ms=3,
                     label=bound if i == 0 and rows else None)  # fmt: skip
        seen: dict[int, tuple[float, float]] = {}  # window -> (first row's time, its growth)
        for row in trace:
            if row[3] is not None:
                seen.setdefault(row[4], (row[0], row[3]))
        grown = list(seen.values())
        low.plot([x for x, _ in grown], [g * 100 for _, g in grown], ".", color=f"C{i}", ms=3)
    target = runs(report)[0].get("tpot_target")
    if target is not None:
        low.axhline(target * 100, color="k", lw=1, ls="--", label=f"target +{target:.0%}")
        low.legend(fontsize=8)
    top.set_ylabel("slack")
    mid.set_ylabel("speculative jobs admitted")
    if mid.get_legend_handles_labels()[0]:
        mid.legend(fontsize=7, title="bound by", title_fontsize=7, loc="upper right")
    low.set_ylabel("primary TPOT growth, %")
    low.set_xlabel("time in the run (s)")
    top.legend(fontsize=8)
    first = runs(report)[0]
    top.set_title(
        title or f"TPOT governor: {first['algorithm']}-{first['target']} on {first['profile']}", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m spex.bench.governor")
    p.add_argument("results", help="a results file of spex bench")
    p.add_argument("--plot", default=None, help="write the plot here (PNG)")
    p.add_argument("--title", default="")
    a = p.parse_args()
    try:
        report = json.loads(Path(a.results).read_text())
        lines = [summary(run) for run in runs(report)]
    except (OSError, ValueError) as exc:
        p.exit(2, f"governor: {a.results}: {exc}\n")
    except (KeyError, IndexError) as exc:
        p.exit(2, f"governor: {a.results}: not a results file of spex bench (no {exc})\n")
    print("\n".join(lines))
    if a.plot:
        plot(report, Path(a.plot), a.title)


if __name__ == "__main__":
    main()
