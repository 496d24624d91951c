"""Speculation policy modules: T2 budget allocation and T3 early termination (pure)."""
