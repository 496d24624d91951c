"""What the pipeline check reports (`gpu_pipeline`): each cell's distributed run beside its
virtual-time prediction on the measured profile, the reward barrier of both sides, the issue's
aims met or missed with their figures, two figures and a short table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spex.bench.gpu_report import SPEEDUP_AIMS, TPOT_AIM, _aim, print_aims, print_stages

__all__ = ["SIM_AIM", "aims", "cell_rows", "finish"]

SIM_AIM = 0.10  # the distributed speedup within this of the virtual-time speedup


def cell_rows(cells: dict[str, Any]) -> list[dict[str, Any]]:
    """Per cell with both sides run: the speedup (the baseline's wall time over SPEX's, the
    same questions), the simulator's from the measured profile and the error, each question
    answered, equal trees on both sides and as simulated, the reward barrier of each side."""
    rows = []
    for key, cell in cells.items():
        base, spex = cell.get("baseline"), cell.get("spex")
        if not base or not spex or "failed" in base or "failed" in spex:
            continue
        sim = cell["simulated"]
        questions = sorted(cell["simulated_digests"]["baseline"])
        row: dict[str, Any] = {
            "cell": key,
            "questions": len(questions),
            "wall_s": {"baseline": base["wall_s"], "spex": spex["wall_s"]},
            "speedup": base["wall_s"] / spex["wall_s"],
            "simulated_speedup": sim["speedup"],
            "simulated_tpot_ratio": sim["tpot_ratio"],
            "simulated_makespan_s": {m: sim["pairs"][-1][m]["makespan_s"] for m in ("baseline", "spex")},
            "answered_once": base["answered"] == questions and spex["answered"] == questions,
            "trees_equal": base["digests"] == spex["digests"],
            "trees_as_simulated": all(
                cell[m]["digests"] == cell["simulated_digests"][m] for m in ("baseline", "spex")
            ),
            "barrier": {"baseline": base["barrier"], "spex": spex["barrier"]},
        }
        row["prediction_error"] = row["simulated_speedup"] / row["speedup"] - 1
        row["tpot_ratio"] = spex["barrier"].get("primary_tpot_ratio")
        rows.append(row)
    return rows


def aims(summary: dict[str, Any], cells: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's aims, each with its figure and whether it was met (None: not measured)."""
    rows = {r["cell"]: r for r in cell_rows(cells)}
    out = []
    for key, row in rows.items():
        out.append(
            _aim(
                f"{key} speedup within {SIM_AIM:.0%} of virtual time's on the measured profile",
                row["prediction_error"],
                lambda v: abs(v) <= SIM_AIM,
                f"virtual time: {row['simulated_speedup']:.2f}x, distributed {row['speedup']:.2f}x",
                percent=True,
            )
        )
    for key, floor in SPEEDUP_AIMS.items():
        row = rows.get(key, {})
        why = "" if not row else f"virtual time on the measured profile: {row['simulated_speedup']:.2f}x"
        out.append(_aim(f"{key} speedup ≥ {floor}x", row.get("speedup"), lambda v, f=floor: v >= f, why))
        out.append(
            _aim(
                f"{key} primary TPOT ≤ x{TPOT_AIM} (the generator's counterfactual)",
                row.get("tpot_ratio"),
                lambda v: v <= TPOT_AIM,
                "",
            )
        )
    whole = [r["answered_once"] and r["trees_equal"] for r in rows.values()]
    out.append(
        _aim(
            "every question answered once, equal trees on both sides",
            float(all(whole)) if whole else None,
            lambda v: v == 1.0,
            f"{sum(whole)} of {len(whole)} cells",
        )
    )
    rb = summary.get("reward_batch")
    out.append(
        _aim(
            f"the reward model batched: {rb['rows'] if rb else 16} paths in one pass faster than each alone",
            None if not rb else rb["alone_s"] / rb["batch_s"],
            lambda v: v > 1.0,
            ""
            if not rb
            else f"largest difference in P(right) batched vs alone: {rb['max_abs_diff']:.2e} ({rb['dtype']})",
        )
    )
    return out


def plot(rows: list[dict[str, Any]], path: Path, where: str) -> None:
    """Each cell's speedup beside virtual time's, and each side's share of time waiting on
    rewards."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    xs = list(range(len(rows)))
    left.bar([x - 0.2 for x in xs], [r["speedup"] for r in rows], 0.4, label="distributed (measured)")
    left.bar(
        [x + 0.2 for x in xs],
        [r["simulated_speedup"] for r in rows],
        0.4,
        label="virtual time, measured profile",
    )
    left.axhline(1.0, color="grey", lw=0.8)
    left.set_ylabel("speedup over the baseline (+5% TPOT target)")
    for ax in (left, right):
        ax.set_xticks(xs, [r["cell"] for r in rows], rotation=20, fontsize=8)
    for i, mode in enumerate(("baseline", "spex")):
        shares = [r["barrier"][mode].get("reward_wait_share", 0.0) for r in rows]
        right.bar([x + (i - 0.5) * 0.4 for x in xs], shares, 0.4, label=mode, color=f"C{i}")
    right.set_ylabel("share of time the generator waits on rewards")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.suptitle(f"The pipeline on {where}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def finish(check: Any) -> dict[str, Any]:
    """The table, the aims and the figures, written; the end of the output printed."""
    from spex.bench.barrier import plot_barrier

    rows = cell_rows(check.cells)
    check.summary["cells"] = rows
    check.summary["aims"] = aims(check.summary, check.cells)
    check.write()
    where = str(check.summary["environment"].get("gpu", "this CPU (a dry run)"))
    if rows:
        check.stage("plot", lambda: plot(rows, check.out / "gpu-pipeline.png", where))
        traces = {
            r["cell"]: {
                m: check.cells[r["cell"]][m]["trace"] | {"share": check.cells[r["cell"]][m]["barrier"]}
                for m in ("baseline", "spex")
            }
            for r in rows
        }
        check.stage(
            "plot barrier", lambda: plot_barrier(traces, check.out / "gpu-pipeline-barrier.png", where)
        )
    print_table(check.summary)
    return check.summary


def print_table(summary: dict[str, Any]) -> None:
    """The end of the output: stages, cells, aims (a device run's reply shows its last lines)."""
    print_stages(summary)
    print("\ncells: wall s baseline/SPEX; speedup; virtual time's (error); primary TPOT x; waits on rewards")
    print("baseline/SPEX; answered once; trees equal (both sides; as simulated)")
    for r in summary.get("cells", []):
        b, s = r["barrier"]["baseline"], r["barrier"]["spex"]
        tpot = "—" if r["tpot_ratio"] is None else f"x{r['tpot_ratio']:.3f}"
        walls = f"{r['wall_s']['baseline']:6.1f}/{r['wall_s']['spex']:6.1f}"
        print(
            f"  {r['cell']:16} {walls}  {r['speedup']:.2f}  "
            f"{r['simulated_speedup']:.2f} ({r['prediction_error']:+.0%})  {tpot}  "
            f"{b.get('reward_wait_share', 0):.0%}/{s.get('reward_wait_share', 0):.0%}  "
            f"{r['answered_once']}  {r['trees_equal']}; {r['trees_as_simulated']}"
        )
    print_aims(summary, 74)
