"""Compare results files as one markdown table: `python -m spex.bench.table FILE...`.

One row a file (`spex bench --mode compare`, with or without `--repeats`): the engine, the
search (marked when `--oracle` ran it, or `--predictor` chose its predictor), the TPOT target,
the speedup and primary-TPOT ratio (with their 95% intervals over the pairs when repeated), the
growth of the primaries' steps the engine measured against the same steps without speculation
(what the governor steers; in brackets the part the speculative prompt rows cost), the
speculative hit rate, compute amplification, whether every run grew the same trees, and
accuracy.

`--critical-path`: instead, where each search's time went, per query, baseline → SPEX (the
last pair's runs): waiting on a primary generation, on an adopted speculative one still
running, on admission to the engine, on a reward."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from spex.bench.comparison import pair_records
from spex.shared.engine.api import ENGINES

__all__ = ["critical_path", "row", "table"]

HEADER = (
    "| engine | search | B | questions | TPOT target | speedup (95% interval) | primary TPOT × "
    "| step growth (prompts) | hit rate | amplification | same trees | accuracy baseline / SPEX |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _ratio(r: dict[str, Any], key: str) -> str:
    if f"{key}_ci95" in r:
        low, high = r[f"{key}_ci95"]
        return f"{r[key]:.2f} ({low:.2f}–{high:.2f})"
    return f"{r[key]:.2f}"


def _labels(r: dict[str, Any], spex: dict[str, Any]) -> tuple[str, str]:
    """The search (marked when `--oracle` ran it, or `--predictor` chose its predictor) and the
    TPOT target, as the tables say them."""
    search = f"{r['algorithm']}-{r['target']}"
    if spex.get("predictor") in ("oracle", "lookahead", "algorithm"):  # the bound, or a predictor chosen
        search += f" ({spex['predictor']})"
    target = spex.get("tpot_target", "unrecorded")
    target = "fixed slack" if target is None else target if isinstance(target, str) else f"+{target:.0%}"
    if spex.get("objective") == "throughput":  # it holds no TPOT target
        target = "throughput"
    engine = r["profile"].rpartition("@")[2]  # a real engine's run records MODEL@ENGINE
    real = engine in ENGINES and engine != "sim"
    if real and "profile_file" in spex and spex["profile_file"] is None:  # no curve: --max-running
        target += " (static pool)"
    return search, target


def _step_growth(r: dict[str, Any]) -> str:
    """The SPEX runs' measured step growth and its prompt part, averaged over the pairs."""
    counted = [p["spex"].get("primary_steps") or {} for p in pair_records(r)]
    counted = [c for c in counted if "growth" in c]
    if not counted:
        return "—"
    growth = sum(c["growth"] for c in counted) / len(counted)
    prompt = sum(c["spec_prompt"] for c in counted) / len(counted)
    return f"{growth:+.1%} ({prompt:+.1%})"


def row(r: dict[str, Any]) -> str:
    spex = pair_records(r)[0]["spex"]
    search, target = _labels(r, spex)
    hit = "—" if r.get("hit_rate") is None else f"{r['hit_rate']:.2f}"
    same = "yes" if r["trees_identical"] else "no"
    if r["trees_identical"] and not r["lossless"]:
        same += f" (rewards ±{r['max_reward_difference']:.0e})"
    return (
        f"| {r['profile']} | {search} | {r['batch_size']} | {r['questions']} "
        f"| {target} | {_ratio(r, 'speedup')} | {_ratio(r, 'tpot_ratio')} | {_step_growth(r)} | {hit} "
        f"| {r['compute_amplification']:.2f} | {same} "
        f"| {r['accuracy_baseline']:.2f} / {r['accuracy_spex']:.2f} |"
    )


def table(paths: list[str]) -> str:
    return "\n".join([HEADER, *(row(json.loads(Path(p).read_text())) for p in paths)])


PATH_BUCKETS = ("generation_s", "adopted_s", "admission_s", "reward_s")
PATH_HEADER = (
    "| engine | search | B | TPOT target | generation | adopted speculation | admission | reward "
    "| speedup |\n|---|---|---|---|---|---|---|---|---|"
)


def critical_path(paths: list[str]) -> str:
    """Seconds per query each search spent blocked, by what on, baseline → SPEX (last pair)."""
    lines = [PATH_HEADER]
    for path in paths:
        r = json.loads(Path(path).read_text())
        last = pair_records(r)[-1]
        search, target = _labels(r, last["spex"])
        base, spex = last["baseline"]["critical_path_s_per_query"], last["spex"]["critical_path_s_per_query"]
        cells = " | ".join(f"{base[k]:.2f} → {spex[k]:.2f}" for k in PATH_BUCKETS)
        lines.append(
            f"| {r['profile']} | {search} | {r['batch_size']} | {target} | {cells} | {r['speedup']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m spex.bench.table")
    p.add_argument(
        "files", nargs="+", metavar="RESULTS.json", help="results files of spex bench --mode compare"
    )
    p.add_argument("--critical-path", action="store_true", help="where the searches' time went, instead")
    a = p.parse_args()
    try:
        print(critical_path(a.files) if a.critical_path else table(a.files))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        p.exit(2, f"table: not the results of spex bench --mode compare ({exc!r})\n")


if __name__ == "__main__":
    main()
