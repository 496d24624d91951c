"""The virtual-time driver: the coordinator core, the simulated engines and the synthetic
workload in one discrete-event loop (`loop`), with its configuration (`config`), engine
bookkeeping (`bookkeeping`), speculative budget (`budget`) and measurements (`metrics`)."""

from spex.bench.vtime.config import BenchConfig
from spex.bench.vtime.loop import BenchResult, EngineFailed, run_bench
from spex.bench.vtime.metrics import CriticalPath, QueryRecord, SpecTotals

__all__ = [
    "BenchConfig",
    "BenchResult",
    "CriticalPath",
    "EngineFailed",
    "QueryRecord",
    "SpecTotals",
    "run_bench",
]
