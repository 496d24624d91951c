"""What the GPU check reports (`gpu_check`): each cell measured beside the simulator's
prediction, the issue's aims met or missed with their figures, one figure, a short table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spex.bench.simcheck import AIM

__all__ = ["aims", "cell_rows", "plot", "print_table"]

STEP_AIM = 1.2  # the 7B decode step at batch 16 within this of batch 1, at context 1k
SPEEDUP_AIMS = {"rstar-10 B=1": 1.5, "rebase-16 B=1": 1.15}
TPOT_AIM = 1.05  # primary TPOT within +5%


def cell_rows(cells: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell: the measured speedup (95% interval), primary TPOT ratio, lossless, the
    simulator's prediction and its error, and both sides' critical paths per query."""
    rows = []
    for key, both in cells.items():
        real, sim = both["real"], both.get("simulated")
        last = real["pairs"][-1]
        row = {
            "cell": key,
            "speedup": real["speedup"],
            "speedup_ci95": real["speedup_ci95"],
            "tpot_ratio": real["tpot_ratio"],
            "lossless": real["lossless"],
            "hit_rate": real["hit_rate"],
            "makespan_s": {"baseline": last["baseline"]["makespan_s"], "spex": last["spex"]["makespan_s"]},
            "critical_path_s_per_query": {
                "baseline": last["baseline"]["critical_path_s_per_query"],
                "spex": last["spex"]["critical_path_s_per_query"],
            },
        }
        if sim is not None:
            row["simulated_speedup"] = sim["speedup"]
            row["simulated_tpot_ratio"] = sim["tpot_ratio"]
            row["prediction_error"] = sim["speedup"] / real["speedup"] - 1
            row["same_trees_as_simulated"] = sim["pairs"][-1]["trees_digest"] == last["trees_digest"]
        rows.append(row)
    return rows


def aims(cells: dict[str, Any], profile: Path | None) -> list[dict[str, Any]]:
    """Each aim with its figure and whether it was met (None: not measured)."""
    out = [{"aim": f"7B step at batch 16 ≤ {STEP_AIM}× batch 1 at context 1k", **_step_ratio(profile)}]
    rows = {r["cell"]: r for r in cell_rows(cells)}
    for key, floor in SPEEDUP_AIMS.items():
        row = rows.get(key)
        speedup = None if row is None else row["speedup"]
        out.append({"aim": f"{key} speedup ≥ {floor}", "value": speedup, "met": _at_least(speedup, floor)})
        error = None if row is None else row.get("prediction_error")
        met = None if error is None else abs(error) <= AIM
        out.append({"aim": f"{key} within {AIM:.0%} of the simulator", "value": error, "met": met})
        tpot = None if row is None else row["tpot_ratio"]
        met = None if tpot is None else tpot <= TPOT_AIM
        out.append({"aim": f"{key} primary TPOT ≤ ×{TPOT_AIM}", "value": tpot, "met": met})
    return out


def _step_ratio(profile: Path | None) -> dict[str, Any]:
    if profile is None:
        return {"value": None, "met": None}
    cells = {(c["batch"], c["context"]): c["tpot_s"] for c in json.loads(profile.read_text())["cells"]}
    context = 1024 if (1, 1024) in cells else min(c for _, c in cells)  # a dry run's grid has no 1k
    if (1, context) not in cells or (16, context) not in cells:
        return {"value": None, "met": None, "context": context}
    ratio = cells[(16, context)] / cells[(1, context)]
    return {"value": ratio, "met": ratio <= STEP_AIM, "context": context}


def _at_least(value: float | None, floor: float) -> bool | None:
    return None if value is None else value >= floor


def plot(profiles: dict[str, Path], cells: dict[str, Any], path: Path, where: str) -> None:
    """Each shape's measured decode rate by batch, and each cell's speedup beside the
    simulator's, in one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spex.bench.engine_speed import Cell, plot_cells

    fig, axes = plt.subplots(1, len(profiles) + 1, figsize=(5 * (len(profiles) + 1), 4))
    axes = list(axes) if len(profiles) else [axes]
    for ax, file in zip(axes, profiles.values(), strict=False):
        report = json.loads(file.read_text())
        measured = [Cell(c["batch"], c["context"], c["tpot_s"], c["tokens_per_s"]) for c in report["cells"]]
        plot_cells(measured, report["meta"]["engine"], path, ax=ax)
        ax.set_xscale("log", base=2)
    ax = axes[-1]
    rows = cell_rows(cells)
    xs = range(len(rows))
    real = [r["speedup"] for r in rows]
    errs = [
        [r["speedup"] - r["speedup_ci95"][0] for r in rows],
        [r["speedup_ci95"][1] - r["speedup"] for r in rows],
    ]
    ax.bar(xs, real, width=0.5, yerr=errs, capsize=4, color="C0", alpha=0.7, label="measured (95% interval)")
    sims = [(x, r["simulated_speedup"]) for x, r in zip(xs, rows, strict=True) if "simulated_speedup" in r]
    if sims:
        ax.plot(*zip(*sims, strict=True), "D", color="C3", label="simulated from the measured profile")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(xs), [r["cell"] for r in rows], rotation=20, fontsize=8)
    ax.set_ylabel("speedup over the baseline (+5% TPOT target)")
    ax.set_title(f"SPEX on {where}, beside the simulator", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def print_table(summary: dict[str, Any]) -> None:
    """The end of the output: stages, cells, aims (a device run's reply shows its last lines)."""
    print("\nstages:")
    for name, stage in summary["stages"].items():
        print(f"  {name:28} {stage['status'][:70]:70} {stage['seconds']:7.1f} s")
    print("\ncells (speedup, 95% interval; primary TPOT ×; simulated; error; lossless):")
    for r in summary.get("cells", []):
        lo, hi = r["speedup_ci95"]
        sim = (
            f"{r['simulated_speedup']:.2f} ({r['prediction_error']:+.0%})"
            if "simulated_speedup" in r
            else "—"
        )
        speedup = f"{r['speedup']:.2f} ({lo:.2f}–{hi:.2f})"
        print(f"  {r['cell']:16} {speedup}  ×{r['tpot_ratio']:.3f}  {sim}  {r['lossless']}")
    print("\naims:")
    for a in summary.get("aims", []):
        value = "—" if a["value"] is None else f"{a['value']:.3f}"
        met = {True: "met", False: "missed", None: "not measured"}[a["met"]]
        print(f"  {a['aim']:48} {value:>8}  {met}")
