"""PNG plots of a grid report (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_all"]


def _rows(report: dict[str, Any], profile: str, algo: str) -> list[dict[str, Any]]:
    rows = [r for r in report["rows"] if r["profile"] == profile and r["algorithm"] == algo]
    return sorted(rows, key=lambda r: r["batch_size"])


def plot_speedup(report: dict[str, Any], path: Path) -> None:
    """One panel per search family (rows) and profile (columns): a colour per search, solid
    with T3 off (lossless), dashed with T3 on, a legend in every panel."""
    profiles = sorted({r["profile"] for r in report["rows"]}, key=lambda p: ("34B" in p, p))
    algos = list(dict.fromkeys(r["algorithm"] for r in report["rows"] if r["algorithm"] != "mix"))
    families = list(dict.fromkeys(a.split("-")[0] for a in algos))
    fig, axes = plt.subplots(
        len(families), len(profiles), figsize=(5 * len(profiles), 3.2 * len(families)),
        sharex=True, sharey=True, squeeze=False,
    )  # fmt: skip
    for row, family in enumerate(families):
        members = [a for a in algos if a.split("-")[0] == family]
        for col, profile in enumerate(profiles):
            ax = axes[row][col]
            for i, algo in enumerate(members):
                rows = _rows(report, profile, algo)
                bs = [r["batch_size"] for r in rows]
                color = f"C{i}"
                off = [r["t3_off"]["speedup"] for r in rows]
                on = [r["t3_on"]["speedup"] for r in rows]
                ax.plot(bs, off, "-o", color=color, label=f"{algo}, T3 off")
                ax.plot(bs, on, "--s", color=color, alpha=0.7, ms=4, label=f"{algo}, T3 on")
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper right")
            if row == 0:
                ax.set_title(profile)
            if row == len(families) - 1:
                ax.set_xlabel("questions in flight (batch size)")
            if col == 0:
                ax.set_ylabel(f"{family}: speedup")
    fig.suptitle("Query throughput speedup of SPEX over the same search (T3 off: lossless)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ablation(report: dict[str, Any], path: Path) -> None:
    rows = [r for r in report["rows"] if "t1_only" in r and "t3_on" in r]
    labels = [f"{r['algorithm']}\nB={r['batch_size']}" for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.27
    for k, (name, title) in enumerate([("t1_only", "T1"), ("t3_off", "T1+T2"), ("t3_on", "T1+T2+T3")]):
        xs = [i + (k - 1) * width for i in range(len(rows))]
        ax.bar(xs, [r[name]["speedup"] for r in rows], width, label=title)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(rows)), labels)
    ax.set_ylabel("speedup")
    ax.set_title(f"Ablation, {rows[0]['profile'] if rows else ''}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_hit_rate(report: dict[str, Any], path: Path) -> None:
    profile = report["rows"][0]["profile"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (algo, xlabel) in zip(
        axes,
        [
            ("rstar-10", "prediction distance (rollouts ahead)"),
            ("rebase-16", "depth of the speculative node"),
        ],
        strict=True,
    ):
        for batch in (1, 8):
            row = next(r for r in _rows(report, profile, algo) if r["batch_size"] == batch)
            by = row["t3_off"]["hit_rate_by_distance"]
            xs = sorted(int(d) for d in by if by[d]["issued"] >= 5)
            ax.plot(xs, [by[str(x)]["hit_rate"] for x in xs], "-o", label=f"B={batch}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("hit rate")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{algo}, {profile}")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_all(report: dict[str, object], out: Path) -> None:
    plot_speedup(report, out / "grid_speedup.png")
    plot_ablation(report, out / "grid_ablation.png")
    plot_hit_rate(report, out / "grid_hit_rate.png")
