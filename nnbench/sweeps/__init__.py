"""Sweeps: a YAML config's cases over its problems (config, space, strategies), run in replaceable
workers (worker, pool) or answered from a finished result file (replay), each record written the
moment it exists (sweep). Generic over workloads: everything workload-specific comes from the
workload's package through `nnbench.workloads`."""
