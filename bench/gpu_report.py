"""What the GPU check reports (`gpu_check`): each cell measured beside the simulator's
prediction, the issue's aims met or missed with their figures, one figure, a short table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spex.bench.simcheck import AIM

__all__ = ["aims", "cell_rows", "plot", "print_table"]

STEP_AIM = 1.2  # the decode step at batch 16 within this of batch 1, at STEP_CONTEXT
STEP_CONTEXT = 1024
SPEEDUP_AIMS = {"rstar-10 B=1": 1.5, "rebase-16 B=1": 1.15}  # the issue's, at +5% TPOT
TPOT_AIM = 1.05  # primary TPOT within +5%


def cell_rows(cells: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell: the measured speedup (95% interval), primary TPOT ratio, lossless, the
    simulator's prediction from the measured profile and its error, the catalog profile's
    expectation, and both sides' critical paths per query."""
    rows = []
    for key, records in cells.items():
        real, sim, catalog = records["real"], records.get("simulated"), records.get("catalog")
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
        if catalog is not None:
            row["catalog_speedup"] = catalog["speedup"]
        rows.append(row)
    return rows


def aims(cells: dict[str, Any], profiles: dict[str, Path], gpu: str) -> list[dict[str, Any]]:
    """The issue's aims, each with its figure, whether it was met (None: not measured) and
    what to expect of it (`why`): the catalog profile's figure on this GPU, where the roofline
    or the simulator already says it is out of reach."""
    out = [_step_aim(name, file, gpu) for name, file in profiles.items()]
    rows = {r["cell"]: r for r in cell_rows(cells)}
    for key, floor in SPEEDUP_AIMS.items():
        row = rows.get(key, {})
        expected = row.get("catalog_speedup")
        why = "" if expected is None else f"the simulator's catalog profile expects {expected:.2f}x"
        out.append(_aim(f"{key} speedup ≥ {floor}x", row.get("speedup"), lambda v, f=floor: v >= f, why))
        out.append(
            _aim(
                f"{key} speedup within {AIM:.0%} of the simulator's from the measured profile",
                row.get("prediction_error"),
                lambda v: abs(v) <= AIM,
                "the value: the prediction's error",
                percent=True,
            )
        )
        out.append(
            _aim(f"{key} primary TPOT ≤ x{TPOT_AIM}", row.get("tpot_ratio"), lambda v: v <= TPOT_AIM, "")
        )
    return out


def _aim(
    aim: str, value: float | None, met: Any, why: str, percent: bool = False, **more: Any
) -> dict[str, Any]:
    return {"aim": aim, "value": value, "met": None if value is None else bool(met(value)), "why": why} | {
        "percent": percent,
        **more,
    }


def _step_aim(name: str, profile: Path, gpu: str) -> dict[str, Any]:
    """The measured step at batch 16 over batch 1 at STEP_CONTEXT, beside the roofline's."""
    from spex.shared.roofline.hardware import parse_profile

    catalog = parse_profile(f"{name}@{gpu}")
    bound = catalog.decode_step_s(16, 16 * STEP_CONTEXT) / catalog.decode_step_s(1, STEP_CONTEXT)
    why = f"the catalog's {catalog.name} roofline gives {bound:.2f}x"
    if bound > STEP_AIM:
        why += ", above the aim: a miss is expected"
    cells = {(c["batch"], c["context"]): c["tpot_s"] for c in json.loads(profile.read_text())["cells"]}
    value = None
    if (1, STEP_CONTEXT) in cells and (16, STEP_CONTEXT) in cells:
        value = cells[(16, STEP_CONTEXT)] / cells[(1, STEP_CONTEXT)]
    else:
        why += f"; not measured: the profile has no batch-1 and batch-16 cells at context {STEP_CONTEXT}"
    return _aim(
        f"{name} step at batch 16 ≤ {STEP_AIM}x batch 1, context {STEP_CONTEXT}",
        value,
        lambda v: v <= STEP_AIM,
        why,
    )


def plot(profiles: dict[str, Path], cells: dict[str, Any], path: Path, where: str) -> None:
    """Each shape's measured decode rate by batch, and each cell's speedup beside the
    simulator's, in one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spex.bench.engine_speed import plot_cells
    from spex.shared.roofline.measured import Cell

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


def print_stages(summary: dict[str, Any]) -> None:
    """The summary's note and each stage's status and time."""
    if summary.get("note"):
        print(f"\n{summary['note']}")
    print("\nstages:")
    for name, stage in summary["stages"].items():
        print(f"  {name:28} {stage['status'][:70]:70} {stage['seconds']:7.1f} s")


def print_table(summary: dict[str, Any]) -> None:
    """The end of the output: stages, cells, aims (a device run's reply shows its last lines)."""
    print_stages(summary)
    print("\ncells: speedup (95% interval over the pairs); primary TPOT x; simulated from the measured")
    print("profile (its error); the catalog profile's; lossless")
    for r in summary.get("cells", []):
        lo, hi = r["speedup_ci95"]
        sim = (
            f"{r['simulated_speedup']:.2f} ({r['prediction_error']:+.0%})"
            if "simulated_speedup" in r
            else "—"
        )
        catalog = f"{r['catalog_speedup']:.2f}" if "catalog_speedup" in r else "—"
        speedup = f"{r['speedup']:.2f} ({lo:.2f}–{hi:.2f})"
        print(f"  {r['cell']:16} {speedup}  x{r['tpot_ratio']:.3f}  {sim}  {catalog}  {r['lossless']}")
    print_aims(summary, 70)


def print_aims(summary: dict[str, Any], width: int) -> None:
    """Each aim of the summary, its value and verdict (`width`: the aims' column)."""
    print("\naims (the issue's):")
    for a in summary.get("aims", []):
        value = "—" if a["value"] is None else (f"{a['value']:+.0%}" if a["percent"] else f"{a['value']:.3f}")
        met = {True: "met", False: "missed", None: "not measured"}[a["met"]]
        print(f"  {a['aim']:{width}} {value:>8}  {met}")
        if a["why"]:
            print(f"      {a['why']}")
