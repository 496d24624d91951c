"""The benchmarks that drive the real services (`spex bench --distributed`, `--affinity-bench
--distributed`) run end to end on a small workload: the services' trees equal virtual time's."""

from rich.console import Console

from spex.bench.affinity import run_affinity
from spex.bench.distributed import run_distributed
from spex.bench.vtime import BenchConfig

CFG = BenchConfig(algorithm="rebase", target=4, batch_size=2, questions=3, mode="spex")


def test_distributed_bench_matches_virtual_time():
    out = run_distributed(CFG, time_scale=0.05, console=Console(quiet=True))
    assert out["baseline"]["trees_digest_equal"] and out["spex"]["trees_digest_equal"]
    assert out["coordinator_events_per_s"] > 0
    live = out["live_coordinator"]  # counted by the coordinator itself, over its own CPU time
    assert live["questions"] == CFG.questions and live["events"] > 0 and live["coordinator_cpu_s"] > 0


def test_distributed_bench_measures_its_time_scale_by_default():
    out = run_distributed(CFG, time_scale=None, console=Console(quiet=True))
    pilot = out["pilot"]
    assert out["time_scale"] == pilot["time_scale"] >= 0.005
    # The chosen scale makes the pilot's overhead at most 10% of the simulated time.
    assert pilot["pilot_overhead_s"] <= 0.1 * pilot["predicted_s"] * pilot["time_scale"] + 1e-9
    assert out["baseline"]["trees_digest_equal"] and out["spex"]["trees_digest_equal"]


def test_affinity_bench_runs_both_ways_through_the_services(tmp_path):
    out = run_affinity(CFG, 2, True, 0.05, str(tmp_path), Console(quiet=True))
    for side in ("on", "off"):
        for kind in ("virtual_time", "distributed"):
            assert out[side][kind]["trees_equal_single_worker"], (side, kind)
        assert 0.0 < out[side]["distributed"]["prefix_cache_hit_rate"] <= 1.0
    assert (tmp_path / "affinity.png").is_file()
