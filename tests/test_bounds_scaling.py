"""Work that grows with a config's space or a run's cases grows no faster than it: counted, not timed (a loaded
CI host makes a timing flaky). The figures these guard (a 999,424-point dry run, `history record` of 8,000 cases)
were measured once; they stay out of a unit test."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _kernel_config(folder: Path, pad: int) -> Path:
    """examples/vector_add with a third axis of `pad` values that no launch expression reads."""
    folder.mkdir(exist_ok=True)
    src = ROOT / "examples" / "vector_add"
    for name in ("vector_add.cu", "reference.py"):
        (folder / name).write_bytes((src / name).read_bytes())
    text = (src / "vector_add.yaml").read_text()
    old = "axes: {BLOCK: [256, 64, 128, 512, 1024], ITEMS: [1, 2, 4]}"
    assert old in text
    text = text.replace(old, old[:-1] + f", PAD: {{start: 1, stop: {pad}}}}}")
    (folder / "cfg.yaml").write_text(text)
    return folder / "cfg.yaml"


def test_a_kernel_configs_cases_are_checked_once_per_value_of_the_axes_each_check_reads(tmp_path, monkeypatch):
    """A 999,424-point space took 175 s to dry-run: every case's scalars, block, grid and shared memory were
    evaluated at every problem. An axis no check reads multiplies the cases, not the checks."""
    from nnbench.workloads.kernel import session
    calls = {"n": 0}
    real = session._check_case

    def counted(*args):
        calls["n"] += 1
        return real(*args)
    monkeypatch.setattr(session, "_check_case", counted)
    counts = {}
    for pad in (8, 64):
        calls["n"] = 0
        decl = session.load(_kernel_config(tmp_path / f"pad{pad}", pad))
        counts[pad] = (len(decl.cases), calls["n"])
    (cases_small, checks_small), (cases_large, checks_large) = counts[8], counts[64]
    assert cases_large == 8 * cases_small
    assert checks_large == checks_small, counts


def test_recording_a_run_stores_its_cases_in_a_fixed_number_of_statements(tmp_path):
    """`history record` of 8,000 cases took 55 s; reading them is counted in test_history.py, storing them here:
    however many cases a run has, it is stored in the same statements."""
    from nnbench.history import db, migrations, store, synthetic
    statements = {}
    for n in (50, 400):
        (run,) = synthetic.history(1, cases={f"v{i}": 0.25 for i in range(n)})
        with db.connect(tmp_path / f"{n}.sqlite") as d:
            migrations.ready(d)
            seen = []
            for name in ("execute", "executemany", "query"):
                method = getattr(d, name)
                setattr(d, name, lambda *a, _m=method, _name=name, **k: (seen.append(_name), _m(*a, **k))[1])
            assert store.record(d, run).new
            statements[n] = len(seen)
            assert len(d.query("SELECT id FROM cases")) == n
    assert statements[400] == statements[50], statements


def test_a_scalar_that_overflows_only_at_a_later_problem_is_refused_at_load(tmp_path):
    """The checks run once per distinct value of the axes they read, and again at every problem: one that reads a
    problem axis is never answered from an earlier problem."""
    import pytest

    from nnbench.errors import NnbenchError
    from nnbench.workloads.kernel import session
    cfg = _kernel_config(tmp_path, 1)
    text = cfg.read_text()
    for old, new in (("{name: n, scalar: int32, value: N}", "{name: n, scalar: int32, value: N * 3000}"),
                     ("{N: [1000003, 16777216]}", "{N: [1000, 1000000]}")):
        assert old in text
        text = text.replace(old, new)
    cfg.write_text(text)
    with pytest.raises(NnbenchError, match=r"args\.n\.value: N \* 3000 is 3000000000 .*at N=1000000; a int32 holds"):
        session.load(cfg)
