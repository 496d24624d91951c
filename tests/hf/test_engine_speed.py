"""`spex profile --engine hf`: the in-process engine measured by batch × context."""

import json

from spex.cli.main import main
from tests.serving.fake_vllm import VERSION, serving


def test_the_hf_profile_measures_each_cell_and_writes_them(tiny_model, tmp_path):
    out = tmp_path / "speed.json"
    args = ["--batches", "1,3", "--contexts", "16,40", "--new-tokens", "4", "--repeats", "1"]
    assert main(["profile", "--engine", "hf", "--model", tiny_model, *args, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    cells = {(c["batch"], c["context"]): c for c in report["cells"]}
    assert set(cells) == {(1, 16), (3, 16), (1, 40), (3, 40)}
    for (batch, _), c in cells.items():
        assert c["tpot_s"] > 0 and abs(c["tokens_per_s"] - batch / c["tpot_s"]) < 1e-6
    assert "@hf" in report["meta"]["engine"]
    assert out.with_suffix(".png").stat().st_size > 0


def test_the_hf_profile_against_a_server_measures_the_same_cells_side_by_side(tiny_model, tmp_path):
    out = tmp_path / "speed.json"
    args = ["--batches", "1,3", "--contexts", "16", "--new-tokens", "4", "--repeats", "1"]
    with serving("--step-ms", "1") as url:
        argv = ["profile", "--engine", "hf", "--model", tiny_model, *args, "--against", url]
        assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    theirs = {(c["batch"], c["context"]): c for c in report["meta"]["against"]["cells"]}
    assert set(theirs) == {(1, 16), (3, 16)} and all(c["tpot_s"] > 0 for c in theirs.values())
    assert report["meta"]["against"]["server"]["version"] == VERSION
