"""Workloads: what to run, its reference, its FLOP and byte counts. No click, no rich."""
