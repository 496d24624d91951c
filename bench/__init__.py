"""Benchmarks that compare SPEX with the baseline side by side (`spex bench --grid`)."""
