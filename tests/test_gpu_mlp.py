"""On the GPU: every MLP version's weight changes after 20 samples against the float64
reference (outputs and deltas poisoned first), on Net 1 and Net 8; and short training runs."""

import numpy as np
import pytest

from nnbench import glyphs, measure, nets, workloads
from nnbench.runtime.compile import compile_sources
from nnbench.workloads.train import batched, mlp

pytestmark = pytest.mark.gpu

GPU_VERSIONS = [v for v in mlp.versions("cuda")]


@pytest.mark.parametrize("net", ["1", "8"])
def test_every_version_matches_the_reference(cuda_backend, net):
    layers = nets.get(net).layers
    init = mlp.init_params(layers, 0)
    data = glyphs.clean(layers[0])
    chosen = [(v, v.defaults()) for v in GPU_VERSIONS]
    compiled = mlp.compile_versions(cuda_backend.arch, chosen)
    hyper = mlp.Hyper()
    rtol = mlp.check_tolerance(init, data, hyper)
    for v, p in chosen:
        err = mlp.check_version(cuda_backend, v, p, compiled[v.name], layers, init, data, hyper)
        assert err <= rtol, (v.name, err, rtol)


def test_versions_train_alike_and_report(cuda_backend):
    """Two epochs on Net 2 through `run`: every version verified, and every version's first-epoch
    error equal to the sequential version's to float32 precision (the trajectories only part,
    chaotically, after many epochs)."""
    layers = nets.get(2).layers
    chosen = mlp.plan([v.name for v in mlp.versions()], "cuda")
    hyper = mlp.Hyper(max_iterations=104)
    recs = list(mlp.run(cuda_backend, chosen, layers, hyper, test_per_letter=2))
    assert [r["status"] for r in recs] == ["PASS"] * len(chosen)
    first = {r["version"]: r["_outcome"].error_curve[0][1] for r in recs}
    for name, e in first.items():
        assert e == pytest.approx(first["sequential"], rel=1e-3), name
    for r in recs:
        assert r["iterations"] == 104 and r["us_per_iteration"] > 0 and r["us_per_feedforward"] > 0
        assert np.isfinite(r["test_accuracy"])


@pytest.mark.parametrize("net", ["2", "8"])
def test_per_sample_versions_are_timed_by_measure_and_pass_the_audits(cuda_backend, net):
    """Every per-sample GPU version (fused included) through the session: its time per iteration `measure`d on
    blocks of iterations (mlp.time_block), issued by the host, the last block audited and the check run again
    on fresh buffers (nnbench/audit.py); the honest versions pass every defense."""
    from nnbench import audit
    layers = nets.get(net).layers
    hyper = mlp.Hyper.from_settings(dict(nets.get(net).settings), max_iterations=104)
    chosen = [(v, p) for v, p in mlp.plan([v.name for v in GPU_VERSIONS], "cuda")]
    for r in mlp.run(cuda_backend, chosen, layers, hyper, test_per_letter=1):
        out = r["_outcome"]
        assert r["status"] == "PASS" and not [f for f in out.failures if f[1]], (r["version"], out.failures)
        assert {d for d, _ in out.failures} >= {audit.TIMED_OUTPUT, audit.FRESH_BUFFERS, audit.HIDDEN_WORK}
        assert out.stats.timing == measure.HOST_ISSUED and out.stats.samples >= mlp.BLOCK_TIMING.min_samples
        assert r["us_per_iteration"] == pytest.approx(1e3 * out.stats.median_ms)


def test_neuron_per_thread_versions_are_one_trajectory(cuda_backend):
    """simple, warped-good and warped-bad are one source (01_neuron_per_thread.cu) at 1, 32 and 50
    threads a block, and kcm adds a merged update that is also one thread's per neuron: a neuron's
    arithmetic is one thread's, in the same order whatever the block, so their weights agree bit
    for bit after any number of steps, and kcm's at 1 and 32 threads a block too. The convergence
    runs on Nets 5-8 rest on this (docs/RESULTS.md): simple's run is the other two's, and kcm ran in
    one-thread blocks. Net 8 at its own settings, 10 epochs."""
    net = nets.get(8)
    hyper = mlp.Hyper.from_settings(dict(net.settings))
    init = mlp.init_params(net.layers, 0, hyper.init_scale, hyper.init)
    data = glyphs.clean(net.layers[0])
    kcm = mlp.plan(["kcm"], "cuda")[0][0]
    sets = mlp.plan(["simple", "warped-good", "warped-bad"], "cuda") + [(kcm, {"THREADS": t}) for t in (32, 1)]
    comps = compile_sources(cuda_backend.arch, [(v.source, p) for v, p in sets])
    got = []
    for (v, p), c in zip(sets, comps):
        g = mlp.GpuNet(cuda_backend, v, p, net.layers, init, data, hyper, c)
        epoch = [g.callable(g.step_launches(s)) for s in range(len(data))]
        for _ in range(10):
            for run in epoch:
                run()
        cuda_backend.synchronize()
        got.append(np.concatenate([w.ravel() for w in g.weights(init)]))
    start = np.concatenate([w.astype(np.float32).astype(np.float64).ravel() for w in init])
    assert np.count_nonzero(got[0] != start) > 0.5 * start.size  # they did train
    assert np.array_equal(got[1], got[0]) and np.array_equal(got[2], got[0])
    assert np.array_equal(got[4], got[3])
    assert not np.array_equal(got[3], got[0])  # kcm's merged update rounds otherwise: its own trajectory


FUSED = {v.name: v for v in mlp.versions("cuda") if "fused" in v.tags}


@pytest.fixture(scope="module")
def fused_compiled(cuda_backend):
    """(variant, params, compiled): fused and fused-partials with their defaults, fused-barrier with
    either barrier, fused with a column longer than its registers hold (read in chunks), fused
    with PREV_W the other way (previous weights or velocities beside the weights), and fused with
    OUT_LOCAL the other way (the output layer exchanged like the others, or in every block)."""
    sets = [(FUSED[n], FUSED[n].defaults()) for n in ("fused", "fused-partials")]
    sets += [(FUSED["fused-barrier"], dict(FUSED["fused-barrier"].defaults(), BARRIER=b)) for b in (0, 1)]
    sets += [(FUSED["fused"], dict(FUSED["fused"].defaults(), COL_REGS=4))]
    sets += [(FUSED["fused"], dict(FUSED["fused"].defaults(), PREV_W=1 - FUSED["fused"].defaults()["PREV_W"]))]
    sets += [(FUSED["fused"], dict(FUSED["fused"].defaults(), OUT_LOCAL=1 - FUSED["fused"].defaults()["OUT_LOCAL"]))]
    comps = compile_sources(cuda_backend.arch, [(v.source, p) for v, p in sets])
    return [(v, p, c) for (v, p), c in zip(sets, comps)]


@pytest.mark.parametrize("net,blocks", [("1", 1), ("1", 7), ("1", None), ("8", None), ("8", 130)])
def test_fused_matches_the_reference_at_any_grid(cuda_backend, fused_compiled, net, blocks):
    """One block (fused-barrier's barriers reduce to __syncthreads, the tagged ones await their own
    values), blocks owning many rows (more than fused has warps), one block per SM. Outputs and
    deltas are poisoned first: a tagged kernel would wait for a value never written and fail,
    fused-barrier would return NaN. Net 8 fits 130 blocks only without OUT_LOCAL: with the output
    layer in every block it needs all 132 SMs, and says so."""
    from nnbench.errors import NnbenchError
    layers = nets.get(net).layers
    init = mlp.init_params(layers, 0, 5.0, "centered")
    data = glyphs.clean(layers[0])
    rtol = mlp.check_tolerance(init, data, mlp.Hyper(0.1, 0.8))
    for v, p, comp in fused_compiled:
        if net == "8" and blocks == 130 and p.get("OUT_LOCAL") == 1:
            with pytest.raises(NnbenchError, match="shared memory"):
                mlp.check_version(cuda_backend, v, p, comp, layers, init, data, mlp.Hyper(0.1, 0.8), blocks)
            continue
        err = mlp.check_version(cuda_backend, v, p, comp, layers, init, data, mlp.Hyper(0.1, 0.8), blocks)
        assert err <= rtol, (v.name, p, blocks, err, rtol)


def test_fused_counts_the_barriers_of_the_model(cuda_backend, fused_compiled):
    from nnbench.workloads.train import fused
    layers = nets.get(8).layers
    data = glyphs.clean(layers[0])
    init = mlp.init_params(layers, 0)
    for v, p, comp in fused_compiled:
        net = mlp.fused_net(cuda_backend, v, p, comp, layers, init, data, mlp.Hyper(), None)
        per = fused.barriers_per_iteration(layers, net.exchange)
        net.train(40, -1.0)  # within one epoch: no epoch-boundary barrier
        assert net.barriers_passed() == 40 * per, v.name
        net.train(2 * len(data), -1.0)  # one epoch boundary, checked on the GPU
        assert net.barriers_passed() == 2 * len(data) * per + 1, v.name


@pytest.mark.parametrize("which", [0, 1, 5])
def test_fused_is_reproducible_and_launches_chain(cuda_backend, fused_compiled, which):
    """The tagged kernels add every sum in a fixed order, so two runs from the same weights agree
    bit for bit; and two launches of 26 samples equal one of 52 on a 26-sample set (the tags move
    on across launches, so a value left by the launch before is never taken for a new one).
    fused's second copy of the weights, its columns, equals the rows bit for bit at the end."""
    v, p, comp = fused_compiled[which]
    layers = nets.get(8).layers
    data = glyphs.clean(layers[0]).take(slice(0, 26))
    init = mlp.init_params(layers, 0, 5.0, "centered")
    runs = []
    for chunks in ((52,), (52,), (26, 26)):
        net = mlp.fused_net(cuda_backend, v, p, comp, layers, init, data, mlp.Hyper(0.02, 0.8), None)
        for n in chunks:
            net.train(n, -1.0)
        rows = net.weights(init)
        runs.append(np.concatenate([W.ravel() for W in rows]))
        if net.exchange == "columns":
            for W, cols in zip(rows[1:], net.transposed()):
                assert np.array_equal(W[:, :-1].T.astype(np.float32), cols)
    assert not np.array_equal(runs[0], np.concatenate([W.ravel() for W in init]))
    assert np.array_equal(runs[0], runs[1]) and np.array_equal(runs[0], runs[2])


def test_fused_refuses_a_grid_that_cannot_be_resident(cuda_backend, fused_compiled):
    from nnbench.errors import NnbenchError
    layers = nets.get(1).layers
    for v, p, comp in fused_compiled[:3]:
        too_many = 2 * cuda_backend.device.sm_count * 8 + 1  # more than the device holds at once
        with pytest.raises(NnbenchError, match="resident"):
            mlp.fused_net(cuda_backend, v, p, comp, layers, mlp.init_params(layers, 0), glyphs.clean(60),
                          mlp.Hyper(), too_many)


def test_fused_stops_at_the_tolerance_like_the_host(cuda_backend, fused_compiled):
    """The kernel decides convergence on the GPU at each epoch boundary (many epochs per launch);
    it must stop at the first epoch the host also calls converged, and not train past it."""
    layers = nets.get(1).layers
    data = glyphs.clean(60)
    for v, p, comp in fused_compiled[:3]:
        init = mlp.init_params(layers, 0)
        probe = mlp.train_fused(cuda_backend, v, p, comp, layers, init, data, data, mlp.Hyper(max_iterations=30 * 52))
        tol = sorted(e for _, e in probe.error_curve)[len(probe.error_curve) // 3]  # reached about two thirds in
        out = mlp.train_fused(cuda_backend, v, p, comp, layers, init, data, data,
                              mlp.Hyper(tolerance=tol, max_iterations=30 * 52))
        errors = [e for _, e in out.error_curve]
        assert out.converged and out.steps == 52 * len(errors)
        assert mlp.converged(errors[-1], tol) and not any(mlp.converged(e, tol) for e in errors[:-1])


# -- mini-batch versions --------------------------------------------------------------------------
BATCHED = batched.versions("cuda")


@pytest.fixture(scope="module")
def batched_compiled(cuda_backend):
    return {v.name: batched.compile_version(cuda_backend.arch, v) for v in BATCHED}


@pytest.mark.parametrize("net,batch", [("1", 256), ("8", 256), ("1", 1000), ("8", 1000), ("2", 1)])
def test_batched_versions_match_the_reference(cuda_backend, batched_compiled, net, batch):
    """Weight changes after batched.CHECK_STEPS steps against the float64 reference, activations,
    deltas and gradient slices poisoned with NaN, for every tile set the tuner may pick; 1000 is a
    batch no tile divides."""
    layers = nets.get(net).layers
    init = mlp.init_params(layers, 0, 5.0, "centered")
    train = batched.training_set(layers[0], batch * batched.CHECK_STEPS + 7, seed=0)
    hyper = mlp.Hyper(rate=1.0, momentum=0.8)
    rtol = batched.check_tolerance(init, train, batch, hyper)
    for v in BATCHED:
        if "cublas" in v.tags:
            pytest.importorskip("cupy")
        if v.arch_problem(cuda_backend.device):  # the wgmma version off Hopper
            continue
        for params, comp in batched_compiled[v.name]:
            net_ = batched.open_net(cuda_backend, v, [(params, comp)], layers, init, train, batch, hyper)
            err = batched.check(net_, init, train, hyper)
            assert err <= rtol, (v.name, params, err, rtol)


def test_batched_versions_train_alike_and_report(cuda_backend):
    """One short run through `run`: every version verified, the same error curve to float32
    precision (same data, order and initial weights), and the report's figures present."""
    layers = nets.get(2).layers
    chosen = mlp.plan([v.name for v in batched.versions() if not v.arch_problem(cuda_backend.device)], "cuda",
                      batched.versions())
    hyper = mlp.Hyper(rate=1.0, momentum=0.5)
    recs = list(batched.run(cuda_backend, chosen, layers, hyper, batch=64, epochs=2, train_samples=640,
                            test_per_letter=2, torch_modes=("eager", "graph")))
    assert [r["status"] for r in recs] == ["PASS"] * len(recs)
    # PyTorch's steps are timed by `measure` as ours are: eager issued by the host (its cost is the host's).
    torch_rows = {r["version"]: r for r in recs if r["version"].startswith("torch")}
    assert torch_rows["torch-eager"]["timing"] == measure.HOST_ISSUED
    assert torch_rows["torch-graph"]["timing"] in (measure.HOT_BATCHED, measure.HOT_SINGLE)
    for r in torch_rows.values():
        assert r["_outcome"].stats.samples >= batched.STEP_TIMING.min_samples
        assert r["us_per_step"] == pytest.approx(1e3 * r["_outcome"].stats.median_ms)
    curves = {r["version"]: [e for _, e in r["_outcome"].error_curve] for r in recs}
    for name, c in curves.items():
        assert len(c) == 2 and c == pytest.approx(curves["batched-numpy"], rel=1e-3), name
    for r in recs:
        assert r["steps"] == 20 and r["us_per_step"] > 0 and r["samples_per_s"] > 0
    from nnbench import audit
    for r in recs:  # the GPU versions' last timed step audited and their check run again on fresh buffers
        if not r["version"].startswith(("torch", "batched-numpy")):
            failures = r["_outcome"].failures
            assert {d for d, _ in failures} >= {audit.TIMED_OUTPUT, audit.FRESH_BUFFERS}, r["version"]
            assert not [f for f in failures if f[1]], (r["version"], failures)
    gpu = {r["version"]: r for r in recs if r["version"] in ("batched", "batched-cublas")}
    for r in gpu.values():
        assert r["gemm_us"] > 0 and r["other_us"] > 0 and r["cublas_gemm_us"] > 0
    assert all(f"{role}=" in gpu["batched"]["tiles"] for role in batched.GEMM_ROLES)


def test_pytorch_rows_train_as_many_steps_as_ours(cuda_backend):
    """A 1-epoch run: the PyTorch rows, timed by `measure`, train one epoch too (they trained two, the
    per-sample rows' warm-up epoch, and reported twice our steps)."""
    chosen = mlp.plan(["batched"], "cuda", batched.versions())
    recs = list(batched.run(cuda_backend, chosen, nets.get(2).layers, mlp.Hyper(rate=1.0, momentum=0.5), batch=64,
                            epochs=1, train_samples=640, test_per_letter=2, torch_modes=("eager", "graph")))
    assert [(r["version"], r["status"], r["steps"], r["epochs_run"]) for r in recs] == [
        (name, "PASS", 10, 1) for name in ("batched", "torch-eager", "torch-graph")]


@pytest.mark.parametrize("exchange", ["nccl", "mpi"])
def test_data_parallel_gpus_match_one_gpu(tmp_path, exchange):
    """Two GPUs, one MPI rank each (nnbench starts mpirun): every version passes the check against
    the float64 reference of the global batch, and trains like the single-GPU run."""
    import csv
    import shutil

    from click.testing import CliRunner

    from nnbench.cli import cli
    from nnbench.runtime import device_count
    if device_count() < 2 or shutil.which("mpirun") is None:
        pytest.skip("needs 2 GPUs and mpirun")
    args = ["train", "--net", "8", "--batch", "1024", "-v", "batched", "-v", "batched-cublas", "--epochs", "1",
            "--train-samples", "8192", "--no-letters"]
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    assert CliRunner().invoke(cli, [*args, "--csv", str(one)]).exit_code == 0
    res = CliRunner().invoke(cli, [*args, "--gpus", "2", "--allreduce", exchange, "--csv", str(two)])
    assert res.exit_code == 0, res.output
    rows1, rows2 = list(csv.DictReader(one.open())), list(csv.DictReader(two.open()))
    same_versions(rows1, rows2, ["batched", "batched-cublas"])
    for a, b in zip(rows1, rows2):
        assert b["status"] == "PASS" and b["ranks"] == "2" and b["exchange"] == exchange
        assert float(b["final_error"]) == pytest.approx(float(a["final_error"]), rel=1e-3)
        assert float(b["comm_us"]) > 0


def same_versions(rows1: list[dict], rows2: list[dict], versions: list[str]) -> None:
    """Both runs wrote one row per version asked for, in the same order: a zip over them then
    compares every version (a zip over two empty files compares nothing)."""
    assert [r["variant"] for r in rows1] == versions, rows1
    assert [r["variant"] for r in rows2] == versions, rows2



@pytest.mark.parametrize("name", ["batched-wgmma-graph", "batched-graph"])
def test_a_graph_missing_one_launch_fails_the_check(cuda_backend, batched_compiled, name):
    """The graph versions are checked through their graphs: each step's graph holds every launch of
    the step (as many kernels as launches), and a graph captured without the step's last launch (the
    update) fails the check against float64 while the whole one passes."""
    v = workloads.get("train", name)
    if v.arch_problem(cuda_backend.device):
        pytest.skip(v.arch_problem(cuda_backend.device))
    layers = nets.get("1").layers
    init = mlp.init_params(layers, 0, 5.0, "centered")
    train = batched.training_set(layers[0], 256 * batched.CHECK_STEPS, seed=0)
    hyper = mlp.Hyper(rate=1.0, momentum=0.8)
    rtol = batched.check_tolerance(init, train, 256, hyper)
    net = batched.open_net(cuda_backend, v, batched_compiled[name], layers, init, train, 256, hyper)
    assert net.step(0).nodes == len(net.step_launches(0))
    assert batched.check(net, init, train, hyper) <= rtol
    planted = batched.open_net(cuda_backend, v, batched_compiled[name], layers, init, train, 256, hyper)
    for j in range(batched.CHECK_STEPS):
        planted._graphs[j] = cuda_backend.capture(planted.callable(planted.step_launches(j)[:-1]))
    assert batched.check(planted, init, train, hyper) > rtol
