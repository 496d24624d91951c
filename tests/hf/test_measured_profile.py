"""A step-time curve measured on the hf engine (`spex profile --engine hf --json`) budgets
speculation on it: the curve reads like a simulated profile, the engine counts each primary
step as it would have been alone, and the TPOT governor steers the pool from them."""

import json
from dataclasses import replace

import pytest

from spex.bench.results import summarize
from spex.bench.vtime import BenchConfig, run_bench
from spex.shared.roofline.capacity import spare_concurrency
from spex.shared.roofline.measured import load_measured
from spex.shared.sim.workload import WorkloadKnobs


def write(tmp_path, cells, name="p.json"):
    path = tmp_path / name
    rows = [{"batch": b, "context": c, "tpot_s": t} for (b, c), t in cells.items()]
    path.write_text(json.dumps({"meta": {"engine": "m@hf"}, "cells": rows}))
    return path


def test_the_curve_interpolates_and_extends_the_measured_cells(tmp_path):
    cells = {(1, 100): 0.10, (4, 100): 0.13, (1, 300): 0.12, (4, 300): 0.19}
    p = load_measured(write(tmp_path, cells))
    assert p.decode_step_s(1, 100) == pytest.approx(0.10)
    assert p.decode_step_s(4, 4 * 300) == pytest.approx(0.19)
    assert p.decode_step_s(2, 2 * 100) == pytest.approx(0.11)  # a third of the way to batch 4
    assert p.decode_step_s(1, 200) == pytest.approx(0.11)
    assert p.decode_step_s(7, 7 * 100) == pytest.approx(0.16)  # the last slope, 0.01 a sequence
    assert p.decode_step_s(1, 10) == pytest.approx(0.10)  # flat below the shortest context
    # Within +10% of 1 sequence at context 100 (0.11 s): one more sequence fits, not two.
    assert spare_concurrency(p, 1, 100, 100, 0.10) == 1
    assert p.counterfactual_s(0.26, 1, 100, 4, 400) == pytest.approx(0.26 * 0.10 / 0.13)


def test_a_cell_the_engine_could_not_hold_is_extrapolated_along_the_batch(tmp_path):
    # A GPU profile skips what does not fit its KV pool: the largest batch at the longest context.
    cells = {(1, 100): 0.10, (4, 100): 0.13, (16, 100): 0.25, (1, 400): 0.12, (4, 400): 0.18}
    p = load_measured(write(tmp_path, cells))
    assert p.step_s[2][1] == pytest.approx(0.18 + (16 - 4) * (0.18 - 0.12) / 3)  # the last slope
    assert p.decode_step_s(16, 16 * 100) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="context 400"):  # one measured batch: nothing to go by
        load_measured(write(tmp_path, {(1, 100): 0.1, (4, 100): 0.2, (1, 400): 0.3}, "thin.json"))


def test_a_noisy_cell_never_makes_a_larger_step_cheaper(tmp_path):
    cells = {
        (1, 128): 0.05,
        (1, 512): 0.06,
        (1, 2048): 0.055,
        (4, 128): 0.04,
        (4, 512): 0.07,
        (4, 2048): 0.08,
    }
    p = load_measured(write(tmp_path, cells))
    steps = [p.decode_step_s(1, c) for c in (128, 512, 2048, 20_000)]
    assert steps == sorted(steps) and min(steps) > 0
    assert p.decode_step_s(4, 4 * 128) >= p.decode_step_s(1, 128)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{", "not a profile"),
        (
            json.dumps(
                {
                    "cells": [
                        {"batch": 1, "context": 8, "tpot_s": 0.1},
                        {"batch": 2, "context": 16, "tpot_s": 0.1},
                    ]
                }
            ),
            "grid",
        ),
        (json.dumps({"cells": [{"batch": 1, "context": 8, "tpot_s": -1}]}), "positive"),
        ('{"cells": [{"batch": 1, "context": 8, "tpot_s": NaN}]}', "positive"),
        (json.dumps({"cells": [{"batch": 1.5, "context": 8, "tpot_s": 0.1}]}), "whole number"),
    ],
)
def test_a_bad_profile_file_is_one_line_naming_the_flag(tmp_path, content, message):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        load_measured(path)
    assert "--profile-file" in str(err.value) and "\n" not in str(err.value)


def test_the_governor_steers_speculation_on_the_hf_engine_by_the_curve(tiny_model, tmp_path):
    # A curve that each sequence makes 20% dearer: the slack, not the KV pool or the batch cap,
    # sets the pool, so every window closed moves the slack, up (speculation cost less than the
    # target) or down (more). A curve measured live on a loaded machine can be flat or bent
    # (batch 1 slower than batch 4) and leave the slack where it started: a flaky test.
    # Steps of 32 tokens: with shorter ones the engine finishes a level before the reward model
    # has scored any of it, so no query has a candidate to speculate on.
    cells = {(b, c): 0.001 * (1 + 0.2 * (b - 1)) * (1 + c / 1000) for b in (1, 4, 16) for c in (16, 128)}
    out = write(tmp_path, cells, "tiny.json")
    cfg = BenchConfig(
        algorithm="rebase", target=8, questions=4, batch_size=2, backend="hf", model=tiny_model, mode="spex",
        knobs=replace(WorkloadKnobs(), step_token_cap=32), profile_file=str(out),
    )  # fmt: skip
    governed = summarize(run_bench(cfg))  # two queries at once: primaries decode beside speculation
    static = summarize(run_bench(replace(cfg, profile_file=None)))
    assert governed.trees_digest == static.trees_digest  # the budget moves speed, not the tree
    assert governed.slack_end != [0.10]  # the governor moved it (the static pool never does)
    assert static.slack_end == [0.10]
    assert governed.governor_trace and governed.governor_trace[-1][4] > 0  # windows closed
    assert 0 < governed.spec_pool_peak <= cfg.max_running


def test_the_simulator_steps_as_a_measured_curve(tmp_path):
    """`--engine sim --profile-file F`: the simulated GPU's decode step is the curve's, its
    prefill the measured rate, its KV pool the engine's; the trees are the workload's still."""
    cells = [
        {"batch": b, "context": c, "tpot_s": t, "first_token_s": t + b * c * 1e-4}
        for (b, c, t) in [(1, 128, 0.010), (8, 128, 0.020), (1, 512, 0.012), (8, 512, 0.030)]
    ]
    path = tmp_path / "server.json"
    path.write_text(json.dumps({"meta": {"engine": "m@vllm", "kv_capacity_tokens": 50_000}, "cells": cells}))
    cfg = BenchConfig(algorithm="rstar", target=4, questions=3, reward="logprob", mode="spex")
    measured = replace(cfg, profile_file=str(path))
    profile = measured.sim_profile()
    assert profile.decode_step_s(8, 8 * 128) == pytest.approx(0.020)
    assert profile.kv_capacity_tokens == 50_000
    assert load_measured(path).prefill_s_per_token == pytest.approx(1e-4)
    assert profile.request_s == pytest.approx(0.0, abs=1e-9) and profile.cache_block_tokens == 1
    assert profile.mixed_step_s(0, 0, [(100, 0)]) == pytest.approx(0.010 + 100 * 1e-4)
    catalog, stepped = summarize(run_bench(cfg)), summarize(run_bench(measured))
    assert stepped.trees_digest == catalog.trees_digest  # the clock moved, not the searches
    assert stepped.makespan_s != catalog.makespan_s and stepped.kv_capacity_tokens == 50_000


def server_profile(tmp_path, request_s, block=None):
    """A server's cells whose first tokens cost `request_s` a request and 1e-4 s a prompt
    token beyond one step; `block`: its prefix cache's block size (vLLM's server info)."""
    cells = [
        {"batch": b, "context": c, "tpot_s": t, "first_token_s": t + b * request_s + b * c * 1e-4}
        for (b, c, t) in [(1, 128, 0.010), (8, 128, 0.020), (1, 512, 0.010), (8, 512, 0.020)]
    ]  # a step flat in context: the cache's hits move prefill only
    server = {} if block is None else {"enable_prefix_caching": "True", "block_size": str(block)}
    meta = {"engine": "m@vllm", "kv_capacity_tokens": 50_000, "server": server}
    path = tmp_path / f"server-{request_s}-{block}.json"
    path.write_text(json.dumps({"meta": meta, "cells": cells}))
    return path


def test_a_servers_per_request_cost_is_fitted_apart_from_its_prefill(tmp_path):
    curve = load_measured(server_profile(tmp_path, 0.030))
    assert curve.request_s == pytest.approx(0.030)
    assert curve.prefill_s_per_token == pytest.approx(1e-4)
    # Cells that fit no per-request cost (first tokens below the prefill line) give none, not less.
    assert load_measured(server_profile(tmp_path, -0.005)).request_s == 0.0


def test_the_simulator_charges_each_admitted_request_and_hits_whole_blocks(tmp_path):
    from spex.shared.engine.api import EngineRequest
    from spex.shared.sim.engine import SimEngine

    def two_requests(path):
        """A 300-token prompt, then a child sharing its first 300: the child's time to its
        first token, and the tokens it found cached."""
        engine = SimEngine(replace(BenchConfig(), profile_file=str(path), backend="sim").sim_profile())
        engine.submit(EngineRequest("a", (("q", 300),), "a", 4, 4), 0.0)
        first = engine.advance_to(float("inf"))[0]
        engine.submit(EngineRequest("b", (("q", 300), ("s", 20)), "b", 4, 4), first.time_s)
        child = engine.advance_to(float("inf"))[0]
        return child.first_token_s - first.time_s, child.cached_tokens

    free_s, free_hit = two_requests(server_profile(tmp_path, 0.0))
    costly_s, _ = two_requests(server_profile(tmp_path, 0.030))
    assert costly_s == pytest.approx(free_s + 0.030)  # admitting the child cost one request
    blocked_s, block_hit = two_requests(server_profile(tmp_path, 0.0, block=128))
    assert (free_hit, block_hit) == (300, 256)  # a 128-token block cache keeps 2 whole blocks
    assert blocked_s == pytest.approx(free_s + 44 * 1e-4)  # the 44 tokens it missed, prefilled


def test_a_block_cache_shares_a_prompt_within_the_step_that_admits_it(tmp_path):
    """vLLM hashes a request's blocks as it allocates them: two requests of one question sent
    together find the first's blocks; SGLang's radix cache takes a prompt once computed."""
    from spex.shared.engine.api import EngineRequest
    from spex.shared.sim.engine import SimEngine

    def hits(path):
        engine = SimEngine(replace(BenchConfig(), profile_file=str(path), backend="sim").sim_profile())
        for rid in ("a", "b"):
            engine.submit(EngineRequest(rid, (("q", 300), (rid, 10)), rid, 4, 4), 0.0)
        done = []
        while len(done) < 2:
            done += engine.advance_to(float("inf"))
        return sorted(c.cached_tokens for c in done)

    assert hits(server_profile(tmp_path, 0.0, block=128)) == [0, 256]
    assert hits(server_profile(tmp_path, 0.0)) == [0, 0]


def test_each_request_pays_its_cost_once_when_a_planned_step_is_cut_short(tmp_path):
    """A submission at a planned step's start replans it: the request it had admitted still
    pays its cost (once), and so does the newcomer."""
    from spex.shared.engine.api import EngineRequest
    from spex.shared.sim.engine import SimEngine

    def busy_s(path):
        engine = SimEngine(replace(BenchConfig(), profile_file=str(path), backend="sim").sim_profile())
        engine.submit(EngineRequest("a", (("q", 100),), "a", 4, 4), 0.0)
        engine.next_event_s()  # plans a's step at 0
        engine.submit(EngineRequest("b", (("r", 100),), "b", 4, 4), 0.0)  # and cuts it short
        done = []
        while len(done) < 2:
            done += engine.advance_to(float("inf"))
        return engine.stats.busy_s

    free, costly = busy_s(server_profile(tmp_path, 0.0)), busy_s(server_profile(tmp_path, 0.030))
    assert costly - free == pytest.approx(2 * 0.030)


BF16 = "bfloat16"


@pytest.mark.parametrize(
    ("meta", "run", "message"),
    [
        ({"deterministic": False}, {"deterministic": True}, "deterministic kernels off"),
        ({"deterministic": True, "dtype": "float32"}, {"deterministic": True, "dtype": BF16}, "in float32"),
    ],
)
def test_a_curve_of_another_mode_is_refused_in_one_line(tmp_path, tiny_model, meta, run, message):
    """A curve measured with other kernels or another dtype prices the engine's steps wrongly:
    the run names what differs instead of budgeting by it."""
    path = tmp_path / "p.json"
    rows = [{"batch": b, "context": c, "tpot_s": 0.01 * b} for b in (1, 2) for c in (64, 128)]
    path.write_text(json.dumps({"meta": {"engine": "m@hf", **meta}, "cells": rows}))
    cfg = BenchConfig(backend="hf", model=tiny_model, profile_file=str(path), **run)
    with pytest.raises(ValueError, match=message) as err:
        cfg.validate()
    assert str(err.value).startswith("profile_file:") and "\n" not in str(err.value)
    replace(cfg, **{k: v for k, v in meta.items()}).validate()  # the same mode: taken
