"""Benchmarks on top of the services and the core: the virtual-time driver, benchmark results,
the grid, the distributed and affinity benchmarks, the oracle bound, the chaos rig. The `spex`
command that runs them is `spex.cli`."""
