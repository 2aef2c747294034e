"""Workloads: what to run, its reference, and its metrics. `session_for` gives a sweep worker the
per-case runner of a suite by name, so the sweep machinery stays suite-agnostic."""


def session_for(suite: str, backend, settings, rtol: float, seed: int, env: dict):
    if suite == "gemm":
        from nnbench.suites import gemm
        return gemm.Session(backend, settings, rtol, seed, env)
    raise ValueError(f"suite {suite!r} has no sweep session")
