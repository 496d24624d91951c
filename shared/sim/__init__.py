"""The simulated GPU engine, its hardware catalog, and the synthetic reasoning workload."""
