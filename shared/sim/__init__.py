"""The simulated GPU engine, its radix prefix cache, and the synthetic reasoning workload."""
