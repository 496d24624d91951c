"""What chooses the speculative work is a setting: `spex bench --predictor` runs it and records
it in the results file (the table marks the row), the coordinator takes `SPEX_PREDICTOR`, and a
bad value is one line naming the variable."""

import json
import subprocess
import sys

import pytest

from spex.bench.table import table
from spex.proto import SubmitQuestionRequest
from spex.services.coordinator.query import new_machine
from spex.shared.core.speculation import PREDICTORS, auto_predictor, lookahead_predictor, predictor_factory
from spex.shared.runtime.settings import Settings


def test_the_bench_runs_the_look_ahead_and_records_it(tmp_path):
    out = tmp_path / "r.json"
    args = ["bench", "--algorithm", "rstar", "--target", "4", "--questions", "2", "--mode", "compare",
            "--predictor", "lookahead", "--json", str(out), "--quiet"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "spex.cli", *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["spex"]["predictor"] == "lookahead" and r["lossless"] and r["spex"]["spec_issued"] > 0
    assert r["baseline"]["predictor"] == "lookahead"  # the run's setting (a baseline predicts nothing)
    [_, _, row] = table([str(out)]).splitlines()
    assert "| rstar-4 (lookahead) | 1 | 2 |" in row


def test_the_coordinator_takes_the_setting():
    req = SubmitQuestionRequest(
        msg_id="m", query_id="q", question="2+2?", algorithm="rstar", target=4, mode="spex"
    )
    assert new_machine(req, Settings.from_env({})).predictor is auto_predictor
    chosen = new_machine(req, Settings.from_env({"SPEX_PREDICTOR": "lookahead"}))
    assert chosen.predictor is lookahead_predictor


def test_a_bad_predictor_is_one_line_naming_the_variable():
    with pytest.raises(ValueError) as err:
        Settings.from_env({"SPEX_PREDICTOR": "oracle"})
    assert str(err.value) == "SPEX_PREDICTOR (predictor): invalid value 'oracle'; auto, algorithm, lookahead"
    with pytest.raises(ValueError, match="predictor: must be one of auto, algorithm, lookahead, not 'x'"):
        predictor_factory("x")
    assert {predictor_factory(name) for name in PREDICTORS} == {auto_predictor, lookahead_predictor,
                                                                 predictor_factory("algorithm")}  # fmt: skip
