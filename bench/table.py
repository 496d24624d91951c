"""Compare results files as one markdown table: `python -m spex.bench.table FILE...`.

One row a file (`spex bench --mode compare`, with or without `--repeats`): the engine, the
search (marked when `--oracle` ran it), the TPOT target, the speedup and primary-TPOT ratio
(with their 95% intervals over the pairs when repeated), the speculative hit rate, compute
amplification, whether every run grew the same trees, and accuracy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["row", "table"]

HEADER = (
    "| engine | search | B | questions | TPOT target | speedup (95% interval) | primary TPOT × "
    "| hit rate | amplification | same trees | accuracy baseline / SPEX |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def _ratio(r: dict[str, Any], key: str) -> str:
    if f"{key}_ci95" in r:
        low, high = r[f"{key}_ci95"]
        return f"{r[key]:.2f} ({low:.2f}–{high:.2f})"
    return f"{r[key]:.2f}"


def _first_pair(r: dict[str, Any]) -> dict[str, Any]:
    return r["pairs"][0] if "pairs" in r and "spex" in r["pairs"][0] else r


def row(r: dict[str, Any]) -> str:
    spex = _first_pair(r)["spex"]
    target = spex.get("tpot_target", "unrecorded")
    target = "fixed slack" if target is None else target if isinstance(target, str) else f"+{target:.0%}"
    real = r["profile"].rpartition("@")[2] in ("hf", "vllm", "sglang")
    if real and "profile_file" in spex and spex["profile_file"] is None:  # no curve: --max-running
        target += " (static pool)"
    hit = "—" if r.get("hit_rate") is None else f"{r['hit_rate']:.2f}"
    search = f"{r['algorithm']}-{r['target']}"
    if spex.get("predictor") == "oracle":  # `--oracle`: the bound, not SPEX's own prediction
        search += " (oracle)"
    same = "yes" if r["trees_identical"] else "no"
    if r["trees_identical"] and not r["lossless"]:
        same += f" (rewards ±{r['max_reward_difference']:.0e})"
    return (
        f"| {r['profile']} | {search} | {r['batch_size']} | {r['questions']} "
        f"| {target} | {_ratio(r, 'speedup')} | {_ratio(r, 'tpot_ratio')} | {hit} "
        f"| {r['compute_amplification']:.2f} | {same} "
        f"| {r['accuracy_baseline']:.2f} / {r['accuracy_spex']:.2f} |"
    )


def table(paths: list[str]) -> str:
    return "\n".join([HEADER, *(row(json.loads(Path(p).read_text())) for p in paths)])


if __name__ == "__main__":
    print(table(sys.argv[1:]))
