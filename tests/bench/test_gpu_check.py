"""The GPU check's dry run (`python -m spex.bench.gpu_check --dry-run`): every stage of the
device run on this CPU with tiny shapes — the forward pass against transformers', both shapes
profiled on the path a GPU runs, the four cells measured baseline against SPEX and predicted
by the simulator from the measured profile — in at most eight files; a stage that fails or
would overrun the budget is reported and the others go on."""

import json

import pytest

from spex.bench import gpu_check


@pytest.fixture(autouse=True)
def kernels_back(monkeypatch):
    monkeypatch.setenv("SPEX_KERNELS", "")  # the dry run sets it for itself; put back after


def test_the_dry_run_runs_every_stage_and_returns_its_files(tmp_path):
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) <= 8 and all(p.is_file() for p in tmp_path.iterdir())
    assert {"summary.json", "cells.json", "gpu-check.png", "gpu-check.log"} <= set(files)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert all(s["status"] == "ok" for s in summary["stages"].values()), summary["stages"]
    assert len(summary["stages"]) == 2 + 2 + 2 * len(gpu_check.CELLS) + 1
    forward = summary["forward"]
    assert len(forward) == 6 and all(row["vs_transformers"] <= row["tolerance"] for row in forward.values())
    assert all(row["vs_transformers"] < 1e-4 for key, row in forward.items() if key.endswith("float32"))
    for name in ("Llemma-7B", "R1-Qwen3-8B"):
        profile = json.loads((tmp_path / f"profile-{name}.json").read_text())
        assert profile["meta"]["forward"].startswith("torch") and profile["cells"]
    rows = {r["cell"]: r for r in summary["cells"]}
    assert set(rows) == {f"{a}-{t} B={b}" for a, t, b in gpu_check.CELLS}
    for row in rows.values():
        assert row["lossless"] and row["same_trees_as_simulated"], row
        assert row["speedup"] > 0 and row["simulated_speedup"] > 0
    assert {a["aim"].split(" ")[0] for a in summary["aims"]} == {
        "Llemma-7B",
        "R1-Qwen3-8B",
        "rstar-10",
        "rebase-16",
    }
    steps = [a for a in summary["aims"] if " step at batch 16" in a["aim"]]
    assert all("roofline gives" in a["why"] and "not measured" in a["why"] for a in steps)  # no batch 16 here
    assert "DRY RUN" in summary["note"] and all("catalog_speedup" in r for r in rows.values())
    log = (tmp_path / "gpu-check.log").read_text()
    assert "bench rebase-16 B=4: ok" in log and "aims (the issue's):" in log and "DRY RUN" in log


def test_a_failed_stage_is_reported_and_the_others_go_on(tmp_path, monkeypatch):
    real = gpu_check.profile

    def broken(check, name, model):
        if name == "Llemma-7B":
            raise RuntimeError("out of memory, say")
        return real(check, name, model)

    monkeypatch.setattr(gpu_check, "profile", broken)
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path)]) == 1
    stages = json.loads((tmp_path / "summary.json").read_text())["stages"]
    assert stages["profile Llemma-7B"]["status"] == "failed: RuntimeError: out of memory, say"
    assert stages["profile R1-Qwen3-8B"]["status"] == "ok" and stages["plot"]["status"] == "ok"
    assert not any(name.startswith("bench") for name in stages)  # the cells need the 7B's profile


def test_a_stage_that_would_overrun_the_budget_is_skipped_and_said_so(tmp_path):
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path), "--budget-s", "20"]) == 0
    stages = json.loads((tmp_path / "summary.json").read_text())["stages"]
    assert stages["models"]["status"] == "ok"
    assert stages["profile Llemma-7B"]["status"] == "skipped: over the time budget"


def test_a_device_name_maps_to_the_catalog_s_gpu():
    assert gpu_check.catalog_gpu("NVIDIA H200") == "H200"
    assert gpu_check.catalog_gpu("NVIDIA H100 80GB HBM3") == "H100"
    assert gpu_check.catalog_gpu("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert gpu_check.catalog_gpu("NVIDIA RTX A6000") == "A6000"
