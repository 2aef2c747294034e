"""Profiling: the SASS instruction mix, the roofline, Nsight Compute, and plots (`nnbench profile`,
`nnbench report`). Reads what the runtime compiled and what the workloads measured; runs nothing itself
except the tools it wraps (cuobjdump, ncu)."""
