"""The pipeline check's dry run (`python -m spex.bench.gpu_pipeline --dry-run`): the services
on this CPU with tiny shapes — Redis, the coordinator, allocator, ingress, one in-process
generator and a reward model — baseline against SPEX on the same questions beside virtual
time; every question answered once, equal trees on both sides, the reward barrier traced, the
files written (marked slow: `make test-slow`; `make gpu-pipeline-dry-run` runs all four cells).
And its parts that need no stack: the barrier's shares, its flags."""

import json

import pytest

from spex.bench import gpu_pipeline
from spex.bench.barrier import barrier_share


@pytest.fixture(autouse=True)
def kernels_back(monkeypatch):
    monkeypatch.setenv("SPEX_KERNELS", "")  # the dry run sets it for itself; put back after


@pytest.mark.slow  # 50-110 s on a shared 2-core machine (two stacks of five processes)
def test_the_dry_run_answers_each_question_once_with_equal_trees_and_traces_the_barrier(tmp_path):
    assert gpu_pipeline.main(["--dry-run", "--out", str(tmp_path), "--cells", "rebase-4:2"]) == 0
    files = {p.name for p in tmp_path.iterdir()}
    pngs = {"gpu-pipeline.png", "gpu-pipeline-barrier.png"}
    assert files == {"summary.json", "cells.json", "profile-Llemma-7B.json", "gpu-pipeline.log", *pngs}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert all(s["status"] == "ok" for s in summary["stages"].values()), summary["stages"]
    assert "DRY RUN" in summary["note"]
    (row,) = summary["cells"]
    assert row["cell"] == "rebase-4 B=2" and row["questions"] == 2
    assert row["answered_once"] and row["trees_equal"], row
    assert row["speedup"] > 0 and row["simulated_speedup"] > 0
    cells = json.loads((tmp_path / "cells.json").read_text())
    for mode in ("baseline", "spex"):
        side = cells["rebase-4 B=2"][mode]
        assert side["answered"] == ["q00000", "q00001"]  # cell 0's questions, each once
        trace = side["trace"]
        assert len(trace["rows"]) > 5 and trace["fields"][:3] == ["t_s", "jobs", "running"]
        barrier = row["barrier"][mode]
        assert 0 <= barrier["reward_wait_share"] <= 1 and barrier["samples"] > 5
        assert max(r[2] for r in trace["rows"]) >= 1  # the generator decoded
    assert summary["reward_batch"]["max_abs_diff"] < 1e-5  # float32: batched as alone
    aims = {a["aim"]: a for a in summary["aims"]}
    assert aims["every question answered once, equal trees on both sides"]["met"]
    log = (tmp_path / "gpu-pipeline.log").read_text()
    assert "aims (the issue's):" in log and "DRY RUN" in log


def test_the_barrier_shares_count_the_generators_idle_samples_by_the_scorers_queue():
    # t, jobs, running, primary, spec, scorer pending, primary step s, alone s
    rows = [
        (0.0, 2, 2, 2, 0, 0, 0.0, 0.0),
        (1.0, 0, 0, 0, 0, 3, 0.1, 0.1),  # idle, rewards pending: waiting on rewards
        (2.0, 0, 0, 0, 0, 1, 0.1, 0.1),
        (3.0, 0, 0, 0, 0, 0, 0.1, 0.1),  # idle, nothing pending: waiting on the rest
        (4.0, 4, 4, 1, 3, 0, 0.3, 0.2),
        (9.0, 0, 0, 0, 0, 5, 0.3, 0.2),  # outside the span
    ]
    share = barrier_share(rows, 0.0, 4.0)
    assert share["samples"] == 5
    assert share["reward_wait_share"] == pytest.approx(2 / 5)
    assert share["other_wait_share"] == pytest.approx(1 / 5)
    assert share["mean_batch"] == pytest.approx(6 / 5) and share["busy_mean_batch"] == pytest.approx(3)
    assert share["primary_tpot_ratio"] == pytest.approx(0.3 / 0.2)
    assert barrier_share(rows, 20.0, 30.0) == {"samples": 0}


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--cells", "rstar10:1"], "--cells"),
        (["--cells", "rstar-10:0"], "--cells"),
        (["--budget-s", "-1"], "--budget-s"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(argv, flag, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        gpu_pipeline.main(["--dry-run", "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and flag in err


@pytest.mark.parametrize(("device", "measured"), [("cuda", False), ("cpu", True)])
def test_docs_gpu_profile_is_used_only_where_a_gpu_measured_it(device, measured, tmp_path, monkeypatch):
    from dataclasses import replace

    from spex.bench import gpu_check

    docs = tmp_path / "profile-Llemma-7B.json"
    docs.write_text(json.dumps({"meta": {"device": device}, "cells": []}))
    monkeypatch.setattr(gpu_pipeline, "DOCS_PROFILE", docs)
    monkeypatch.setattr(gpu_check, "profile", lambda check, name, model: "measured now")
    out = tmp_path / "out"
    out.mkdir()
    check = gpu_check.Check(out, replace(gpu_check.GPU, device="cpu"))  # a full-size plan, no device read
    got = gpu_pipeline.find_profile(check, tmp_path)
    assert got == ("measured now" if measured else out / docs.name)
