"""Drivers on top of the services and the core: the virtual-time driver, benchmark results,
the grid, the distributed benchmark, the oracle bound, and the `spex` command."""
