"""Gradient buckets of data-parallel training, without a GPU: the bucket plan; a GPU step's launches
recorded by a fake backend (the single-GPU step and the one-allreduce step exactly as before buckets
existed; the bucketed step's side-stream order: each bucket handed over after its layers' gradients,
summed, allreduced once, updated, and the default stream waiting for it all at the end); CPU ranks
training in buckets give the single-process result; the PyTorch DDP row skips without PyTorch."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from nnbench import nets
from nnbench.runtime import exchange
from nnbench.workloads.train import batched, mlp

from .conftest import assert_ranks_match_one_process, mpirun_python, needs_mpi

HERE = Path(__file__).parent
SIDE = "side"


# -- the plan ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("sizes, cap, want", [
    ([62000, 252000, 252000, 50400, 728], 524288, [[4, 3, 2], [1, 0]]),
    ([10, 10, 10, 10], 20, [[3, 2], [1, 0]]),
    ([10, 50, 10, 10], 20, [[3, 2], [1], [0]]),  # a layer over the cap is a bucket of its own
    ([10, 10, 10], 0, [[2, 1, 0]]),  # cap 0: one bucket (the allreduce after the backward pass)
    ([], 100, []),
])
def test_buckets_follow_the_backward_pass_within_the_cap(sizes, cap, want):
    got = exchange.plan_buckets(sizes, cap)
    assert got == want
    assert [l for b in got for l in b] == list(range(len(sizes) - 1, -1, -1))  # every layer once, in backward order
    for b in got:
        assert len(b) == 1 or sum(sizes[l] for l in b) <= cap or cap <= 0


def test_bucket_ranges_tile_the_flat_buffer():
    sizes = [o * batched.round4(i + 1) for i, o in zip(nets.get(8).layers, nets.get(8).layers[1:])]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    covered = np.zeros(int(offsets[-1]), int)
    for b in exchange.plan_buckets(sizes, exchange.bucket_floats(2)):
        first, count = exchange.bucket_range(offsets, b)
        covered[first:first + count] += 1
    assert (covered == 1).all()
    assert exchange.bucket_floats(2) == 524288 and exchange.bucket_floats(0) == 0


# -- a GPU step's launches, recorded ----------------------------------------------------------------
def _norm(a):
    if isinstance(a, bytes):
        return ("b", hashlib.sha256(a).hexdigest()[:16])
    if isinstance(a, (float, np.floating)):
        return ("f", float(a))
    return ("i", int(a))


class FakeBackend:
    """Enough of CudaBackend for BatchedNet to build a step: buffers are distinct addresses, a launch
    appends (kernel, grid, block, arguments, signature, smem, stream) to `log` when it runs."""

    name = "cuda"
    runs_kernels = True

    def __init__(self) -> None:
        blocks = (lambda total, threads=256: max(1, min(-(-total // threads), 32)))
        self.device = SimpleNamespace(sm_count=4, stride_blocks=blocks)
        self.log: list = []
        self._next = 1

    def upload(self, host: np.ndarray) -> int:
        self._next += 1
        return self._next << 28

    def bind(self, kernel, grid, block, args, signature=None, smem=0, stream=None):
        entry = (kernel.name, tuple(int(g) for g in grid), tuple(block), tuple(_norm(a) for a in args), signature,
                 smem, stream)
        return lambda: self.log.append(entry)


class FakeExchange:
    """The exchange's calls, logged in the same stream of events: its allreduce on the default stream
    (one bucket) or the side stream (buckets), the handoff to the side stream and the join back."""

    def __init__(self, log: list, stream=SIDE) -> None:
        self.log, self.stream = log, stream

    def launcher(self, buf, count: int):
        return lambda: self.log.append(("allreduce", int(buf), count, None))

    def side_launcher(self, buf, count: int):
        return lambda: self.log.append(("allreduce", int(buf), count, SIDE))

    def handoff(self):
        return lambda: self.log.append(("handoff",))

    def join(self):
        return lambda: self.log.append(("join",))


def _kernel(name: str):
    return SimpleNamespace(name=name)


def fake_net(layers, batch: int, exchange: bool, bucket_cap: int = 0, ranks: int = 2):
    be = FakeBackend()
    params = (("BK", 16), ("BM", 64), ("BN", 64), ("WM", 32), ("WN", 32))
    gemms = {role: batched.GemmKernel(_kernel(name), params, 128, 2) for role, name in batched.GEMM_KERNELS.items()}
    kernels = {name: _kernel(name) for name in batched.ELEMENTWISE}
    init = mlp.init_params(layers, 0, 4.0)
    train = batched.training_set(layers[0], batch * 2, seed=0)
    ex = FakeExchange(be.log) if exchange else None
    kw = dict(exchange=ex, rank=1, ranks=ranks) if exchange else {}
    if bucket_cap:
        kw["bucket_cap"] = bucket_cap
    net = batched.BatchedNet(be, kernels, layers, init, train, batch, mlp.Hyper(rate=1.0, momentum=0.8), gemms=gemms,
                             **kw)
    return net, be


def launch_log(net, be) -> list:
    be.log.clear()
    net.callable(net.step_launches(1))()
    return list(be.log)


def digest(log: list) -> str:
    return hashlib.sha256(repr(log).encode()).hexdigest()[:24]


# Net 2 (60-100-100-100-7) at batch 2048 (split-K weight gradients) and Net 1 at 96, recorded from
# main at 6cadd9c, before buckets: the single-GPU step and the one-allreduce step, launch by launch.
BEFORE = {
    ("2", 2048, False): ("63ca1b18c04d1ddd9d4eb091", 16),
    ("2", 2048, True): ("e56e0428e2356fab7e545447", 21),  # four split-K layers: a slice sum each
    ("1", 96, False): ("7b819e47273252090a078459", 12),
    ("1", 96, True): ("18c2e6f1d4b944392e61da4e", 13),
}


@pytest.mark.parametrize("net_name, batch, exchange", list(BEFORE))
def test_steps_without_buckets_launch_exactly_as_before(net_name, batch, exchange):
    net, be = fake_net(nets.get(net_name).layers, batch, exchange)
    log = launch_log(net, be)
    assert (digest(log), len(log)) == BEFORE[(net_name, batch, exchange)], log


def _side_order(log: list, net) -> None:
    """The invariants of a bucketed step's launch order (module docstring)."""
    flat, off = int(net.flat), net.flat_off
    part = {flat + 4 * int(off[l]): l + 1 for l in range(net.L)}  # flat address -> weight layer (1-based)
    grad_out = {int(net.G[l]): l + 1 for l in range(net.L)}  # a weight-gradient GEMM's output -> its layer
    assert log[-1] == ("join",) and sum(e == ("join",) for e in log) == 1
    written, handed, reduced, covered = set(), set(), {}, np.zeros(int(off[-1]), int)
    for i, e in enumerate(log):
        if e == ("handoff",):
            handed = set(written)
        elif e[0] == "weight_gradient":
            assert e[6] is None
            written.add(grad_out[e[3][-4][1]])  # its G argument
        elif e[0] == "allreduce":
            _, ptr, count, stream = e
            assert stream == SIDE
            first = (ptr - flat) // 4
            covered[first:first + count] += 1
            for addr, l in part.items():
                if ptr <= addr < ptr + 4 * count:
                    assert l in handed, f"layer {l}'s gradient is allreduced before the side stream waits for it"
                    reduced[l] = i
        elif e[0] == "sum_slices":
            l = part[e[3][-1][1]]
            assert e[6] == SIDE and l not in reduced
            assert l in handed, f"layer {l}'s slices are summed before the side stream waits for them"
        elif e[0] == "momentum_update":
            l = part[e[3][2][1]]  # the gradient it reads is the flat buffer's, summed over the ranks
            assert e[6] == SIDE and l in reduced
            reduced[l] = -1
        elif e[0] in ("forward_sigmoid", "output_delta_batch", "backward_delta"):
            assert e[6] is None
    assert (covered == 1).all(), "every gradient float allreduced exactly once"
    assert sorted(reduced) == list(range(1, net.L + 1)) and set(reduced.values()) == {-1}, "every layer updated"


@pytest.mark.parametrize("net_name, batch, cap, buckets", [("2", 2048, 12000, 3), ("1", 96, 4300, 2),
                                                            ("2", 2048, 10 ** 9, 1)])
def test_buckets_go_to_the_side_stream_in_order(net_name, batch, cap, buckets):
    net, be = fake_net(nets.get(net_name).layers, batch, True, cap)
    log = launch_log(net, be)
    assert sum(e[0] == "allreduce" for e in log) == buckets == len(net.buckets)
    _side_order(log, net)
    # the default stream's compute is the single-GPU step's, launch for launch (kernels and grids)
    one, be1 = fake_net(nets.get(net_name).layers, batch // 2, False)
    compute = [e[:3] for e in launch_log(one, be1) if e[0] != "momentum_update"]
    assert [e[:3] for e in log if len(e) > 6 and e[6] is None] == compute


def test_a_bucket_handed_over_too_early_fails_the_order_check(monkeypatch):
    """The check itself: a step whose handoff comes before the last gradient of its bucket fails."""
    net, be = fake_net(nets.get(2).layers, 2048, True, 12000)
    log = launch_log(net, be)
    i = next(i for i, e in enumerate(log) if e == ("handoff",))
    log.insert(i - 1, log.pop(i))  # the handoff moved before its bucket's last weight gradient
    with pytest.raises(AssertionError, match="before the side stream waits"):
        _side_order(log, net)


# -- CPU ranks --------------------------------------------------------------------------------------
@needs_mpi
def test_cpu_ranks_in_buckets_give_the_single_process_result(tmp_path):
    """3 ranks, Net 1 in 2 buckets (non-blocking allreduces, started as the layers' gradients
    exist): the same weights and error curve as one process."""
    cap = 4300  # Net 1's layers: 3660, 3660, 427 floats -> [[2, 1], [0]]
    res = mpirun_python(3, str(HERE / "mpi" / "train_ranks.py"), str(tmp_path / "w.npz"), str(cap))
    assert res.returncode == 0, res.stdout + res.stderr
    assert int(np.load(tmp_path / "w.npz")["buckets"]) == 2
    assert_ranks_match_one_process(tmp_path / "w.npz")


# -- the PyTorch DDP row ----------------------------------------------------------------------------
def test_ddp_says_why_it_cannot_run(monkeypatch):
    from nnbench.workloads.train import ddp
    monkeypatch.setitem(sys.modules, "torch", None)
    assert ddp.unavailable() == "PyTorch is not installed"
    dist = SimpleNamespace(is_available=lambda: True, is_nccl_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(distributed=dist, cuda=SimpleNamespace(
        is_available=lambda: True)))
    assert ddp.unavailable() == "this PyTorch's torch.distributed has no NCCL"
    assert ddp.label(2) == "fp32 DDP (NCCL, bucket_cap_mb=2), SGD(momentum), TF32 off"
    assert ddp.label(0).startswith("fp32 DDP (NCCL, bucket_cap_mb=25)")


class OneRankComm:
    """An MPI communicator of one rank, in-process: MPI itself is never initialised in the test
    process (a process that is an MPI singleton breaks the mpirun that later tests start)."""

    def allreduce(self, value):
        return value

    def bcast(self, value, root=0):
        return value

    def allgather(self, value):
        return [value]

    def Iallreduce(self, *_args, **_kw):
        return SimpleNamespace(Wait=lambda: None)

    def Allreduce(self, *_args, **_kw):
        return None


def test_a_data_parallel_run_without_torch_skips_the_ddp_row(monkeypatch):
    """A world of one rank on the CPU backend, --compare torch: our row trains in buckets and the
    DDP row is one SKIP row that says why."""
    from nnbench.runtime.cpu import CpuBackend
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(exchange, "CpuExchange", lambda w: SimpleNamespace(
        w=w, start=lambda part: w.comm.Iallreduce(part), allreduce=lambda flat: None))
    w = exchange.World(OneRankComm(), 0, 1, 0)
    chosen = mlp.plan(["batched-numpy"], "cpu", batched.versions())
    recs = list(batched.run(CpuBackend(), chosen, nets.get(1).layers, mlp.Hyper(rate=3.0, momentum=0.8), 64, epochs=1,
                            train_samples=640, test_per_letter=1, torch_modes=("ddp",), world=w, bucket_mb=0.01))
    assert [(r["version"], r["status"]) for r in recs] == [("batched-numpy", "PASS"), ("torch-ddp", "SKIP")]
    assert recs[1]["error"] == "PyTorch is not installed" and "DDP" in recs[1]["params"]
    assert recs[0]["params"] == "buckets of <= 0.01 MB (non-blocking MPI)"


def test_bucket_mb_without_ranks_is_one_line():
    from click.testing import CliRunner

    from nnbench.cli import cli
    res = CliRunner().invoke(cli, ["train", "--net", "1", "--batch", "64", "--bucket-mb", "2"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines == ["nnbench: error: --bucket-mb 2: applies with --gpus N > 1"], res.output


if __name__ == "__main__":  # print BEFORE's digests from the code on sys.path (main before buckets)
    for key in BEFORE:
        n, b = fake_net(nets.get(key[0]).layers, key[1], key[2])
        lg = launch_log(n, b)
        print(key, (digest(lg), len(lg)))


@pytest.mark.gpu
def test_one_rank_world_on_a_gpu_passes_in_buckets_and_beside_ddp(cuda_backend):
    """The GPU path of a data-parallel run on one GPU (a world of one MPI rank): NCCL over one rank,
    the side stream, its events and every bucket's pass; one bucket and 2 MB buckets both pass the
    float64 check and split the step; the DDP row passes too where torch.distributed has NCCL
    (lab/scripts/dp_one_rank.py is the Net 8 version of this)."""
    w = exchange.World(OneRankComm(), 0, 1, 0)
    chosen = mlp.plan(["batched"], "cuda", batched.versions())
    for mb, modes in ((0.0, ()), (0.01, ("ddp",))):
        recs = list(batched.run(cuda_backend, chosen, nets.get(2).layers, mlp.Hyper(rate=1.0, momentum=0.5),
                                256, epochs=1, train_samples=1024, test_per_letter=1, torch_modes=modes, world=w,
                                bucket_mb=mb))
        ours = recs[0]
        assert ours["status"] == "PASS" and ours["buckets"] == (1 if mb == 0 else 4)
        assert ours["compute_us"] > 0 and ours["comm_us"] > 0
        for r in recs[1:]:
            assert r["version"] == "torch-ddp" and r["status"] in ("PASS", "SKIP"), r
