"""The simulator checked against a real engine: each cell's measured speedup beside the one the
simulator predicts for the same trees, as a markdown table and a plot.

    python -m spex.bench.simcheck REAL.json:SIM.json [...] [--plot docs/real/simcheck.png]

REAL is `spex bench --engine vllm|hf ... --content synthetic --mode compare --repeats N`, SIM the
same flags with `--engine sim --profile-file F` (the engine's measured curve). Both sides grew
the same synthetic trees (their `trees_digest` agree, else the pair is refused): what differs
is only the clock. With `--statistical` REAL may be a real-content run (the model's own text)
and SIM the workload fitted to such runs' statistics (step lengths, depth, branching): the
trees differ, and the prediction is of the cell, not of its trees. A prediction counts as
within the aim when it is within 15% of the measured speedup (`AIM`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from spex.bench.comparison import pair_records

__all__ = ["AIM", "Check", "check", "plot", "table"]

AIM = 0.15  # a prediction within 15% of the measured speedup


class Check:
    """One cell: the real run (repeated pairs) and the simulator's prediction of it."""

    def __init__(self, real: dict[str, Any], sim: dict[str, Any], name: str) -> None:
        self.real, self.sim, self.name = real, sim, name

    @property
    def error(self) -> float:
        """The prediction's relative error against the measured speedup."""
        return self.sim["speedup"] / self.real["speedup"] - 1

    @property
    def search(self) -> str:
        return f"{self.real['algorithm']}-{self.real['target']} B={self.real['batch_size']}"


def check(pair: str, same_trees: bool = True) -> Check:
    """`REAL.json:SIM.json` read (and, with `same_trees`, checked to be the same trees)."""
    real_path, sep, sim_path = pair.partition(":")
    if not sep:
        raise ValueError(f"{pair!r}: expected REAL.json:SIM.json")
    real, sim = (json.loads(Path(p).read_text()) for p in (real_path, sim_path))
    if same_trees and pair_records(real)[-1]["trees_digest"] != pair_records(sim)[-1]["trees_digest"]:
        raise ValueError(f"{pair!r}: the two runs grew different trees (not the same workload)")
    if not real["speedup"] > 0:
        raise ValueError(f"{pair!r}: the real run has no speedup to compare with")
    return Check(real, sim, Path(real_path).stem)


def table(checks: list[Check]) -> str:
    lines = [
        "| search | real: speedup (95% interval) | simulated | error | real: TPOT × | simulated "
        "| baseline makespan real / simulated | prefix-cache hits real / simulated |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        low, high = c.real.get("speedup_ci95", (c.real["speedup"], c.real["speedup"]))
        real_base, sim_base = pair_records(c.real)[-1]["baseline"], pair_records(c.sim)[-1]["baseline"]
        mark = "" if abs(c.error) <= AIM else " (outside 15%)"
        lines.append(
            f"| {c.search} | {c.real['speedup']:.2f} ({low:.2f}–{high:.2f}) | {c.sim['speedup']:.2f} "
            f"| {c.error:+.0%}{mark} | {c.real['tpot_ratio']:.2f} | {c.sim['tpot_ratio']:.2f} "
            f"| {real_base['makespan_s']:.0f} s / {sim_base['makespan_s']:.0f} s "
            f"| {real_base['prefix_cache_hit_rate']:.2f} / {sim_base['prefix_cache_hit_rate']:.2f} |"
        )
    return "\n".join(lines)


def plot(checks: list[Check], path: Path, title: str = "") -> None:
    """Measured speedup (bars, with the 95% interval) and the prediction (a marker) per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(checks), 3.8))
    xs = range(len(checks))
    real = [c.real["speedup"] for c in checks]
    cis = [c.real.get("speedup_ci95", (c.real["speedup"],) * 2) for c in checks]
    errs = [
        [r - lo for r, (lo, _) in zip(real, cis, strict=True)],
        [hi - r for r, (_, hi) in zip(real, cis, strict=True)],
    ]
    ax.bar(xs, real, width=0.5, yerr=errs, capsize=4, color="C0", alpha=0.7, label="measured (95% interval)")
    ax.plot(xs, [c.sim["speedup"] for c in checks], "D", color="C3", label="simulated from the profile")
    for x, r in zip(xs, real, strict=True):  # the ±15% band around each measurement
        ax.fill_between([x - 0.3, x + 0.3], r * (1 - AIM), r * (1 + AIM), color="grey", alpha=0.15, lw=0)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(xs), [c.search for c in checks])
    ax.set_ylabel("speedup over the baseline")
    ax.set_title(title or "the simulator against the real engine (grey: ±15%)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m spex.bench.simcheck")
    p.add_argument("pairs", nargs="+", metavar="REAL.json:SIM.json")
    p.add_argument("--plot", default=None, help="write the plot here (PNG)")
    p.add_argument("--title", default="")
    p.add_argument("--statistical", action="store_true", help="REAL grew other trees (real content)")
    a = p.parse_args()
    try:
        checks = [check(pair, same_trees=not a.statistical) for pair in a.pairs]
    except (OSError, ValueError, KeyError) as exc:
        p.exit(2, f"simcheck: {exc}\n")
    print(table(checks))
    if a.plot:
        plot(checks, Path(a.plot), a.title)


if __name__ == "__main__":
    main()
