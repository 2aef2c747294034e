"""PyTorch DistributedDataParallel over the ranks of a data-parallel run: the baseline row beside
ours (`nnbench train --batch B --gpus N --compare torch`).

The same net, data, initial weights and update as nnbench's mini-batch trainer (the math of
mlp.torch_program): each rank trains its slice of every global batch on the slice's mean E; DDP
averages the gradients over the ranks (NCCL, in buckets of `bucket_mb`, allreduced while the
backward pass runs), which makes the step the global batch's mean; SGD(momentum) then follows
batched.step exactly. fp32, TF32 off. Checked after `steps` steps against the float64 reference of
the global batch, as ours are, and timed by the caller's timer (measure_collective, host-issued as
PyTorch eager is on one GPU: every rank must call the collectives equally often).

Knows nothing about click or rich.
"""

from __future__ import annotations

import socket

import numpy as np

DEFAULT_DDP_BUCKET_MB = 25.0  # DDP's own default, used where ours is one bucket (--bucket-mb 0)


def unavailable() -> str | None:
    """Why no DDP row can run here (None: it can): PyTorch, torch.distributed with NCCL and a GPU."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return "this PyTorch has no torch.distributed"
    if not dist.is_nccl_available():
        return "this PyTorch's torch.distributed has no NCCL"
    if not torch.cuda.is_available():
        return "PyTorch sees no GPU"
    return None


def bucket_cap(bucket_mb: float) -> float:
    return bucket_mb if bucket_mb > 0 else DEFAULT_DDP_BUCKET_MB


def label(bucket_mb: float) -> str:
    """The row's params: its precision and how it communicates."""
    return f"fp32 DDP (NCCL, bucket_cap_mb={bucket_cap(bucket_mb):g}), SGD(momentum), TF32 off"


def process_group(world) -> None:
    """torch.distributed's NCCL group over the MPI world (once per process): rank 0 picks a free
    local port and the others learn it through MPI. The ranks of one host (the lent machines)."""
    import torch
    import torch.distributed as dist
    if dist.is_initialized():
        return
    port = None
    if world.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = world.comm.bcast(port, root=0)
    dev = torch.device("cuda", world.local_rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=world.rank,
                            world_size=world.size, device_id=dev)


def train(world, layers, init, train_set, test, hyper, batch: int, epochs: int, check: tuple[int, list],
          time_step, bucket_mb: float, out, fixed_epochs, progress=None):
    """One DDP row: the check, `epochs` epochs as ours, then the steady-state step timed by
    `time_step(launch)` -> measure.Stats, and the same step without DDP's allreduce (no_sync) for the
    split. Fills and returns `out` (the mini-batch trainer's Outcome) with weights_rel_err set; the
    trainer's `fixed_epochs` runs the epochs, so that DDP's row is trained exactly as ours are."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from nnbench.workloads.train import mlp

    process_group(world)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda", world.local_rank)
    sub, rank = batch // world.size, world.rank
    linears = torch.nn.Sequential(*[torch.nn.Linear(n_in, n_out) for n_in, n_out in zip(layers, layers[1:])]).to(dev)

    def restart() -> None:
        with torch.no_grad():
            for lin, W0 in zip(linears, init):
                lin.weight.copy_(torch.tensor(W0[:, :-1], dtype=torch.float32))
                lin.bias.copy_(torch.tensor(W0[:, -1], dtype=torch.float32))
        for state in opt.state.values():
            if state.get("momentum_buffer") is not None:
                state["momentum_buffer"].zero_()

    def forward(x):
        o = x
        for lin in linears:
            o = torch.sigmoid(F.linear(o, lin.weight, lin.bias))
        return o

    class Net(torch.nn.Module):  # the Linear layers in order: DDP's buckets follow the backward pass
        def __init__(self) -> None:
            super().__init__()
            self.layers = linears

        def forward(self, x):
            return forward(x)

    model = DistributedDataParallel(Net(), device_ids=[dev.index], bucket_cap_mb=bucket_cap(bucket_mb),
                                    broadcast_buffers=False)
    opt = torch.optim.SGD(linears.parameters(), lr=hyper.rate, momentum=hyper.momentum)
    restart()
    X = torch.tensor(train_set.x, dtype=torch.float32, device=dev)
    T = torch.tensor(train_set.t, dtype=torch.float32, device=dev)
    steps_per_epoch = len(train_set) // batch
    errors = torch.zeros((), device=dev)

    def step(s: int) -> None:
        lo = s * batch + rank * sub
        x, t = X[lo:lo + sub], T[lo:lo + sub]
        opt.zero_grad(set_to_none=False)
        e = 0.5 * ((t - model(x)) ** 2).sum()
        (e / sub).backward()  # DDP averages over the ranks: the global batch's mean E
        opt.step()
        errors.add_(e.detach())

    def weights() -> list[np.ndarray]:
        return [np.concatenate([lin.weight.detach().double().cpu().numpy(),
                                lin.bias.detach().double().cpu().numpy()[:, None]], 1) for lin in linears]

    steps, ref = check
    for s in range(steps):
        step(s)
    torch.cuda.synchronize()
    out.weights_rel_err = mlp.weight_change_error(weights(), ref, init)
    restart()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def run_epoch():
        errors.zero_()
        start.record()
        for s in range(steps_per_epoch):
            step(s)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3, world.sum(float(errors))

    fixed_epochs(out, epochs, steps_per_epoch, batch, run_epoch, progress)
    torch.cuda.synchronize()
    with torch.no_grad():
        out.test_outputs = forward(torch.tensor(test.x, dtype=torch.float32, device=dev)).double().cpu().numpy()
        out.train_accuracy = mlp.accuracy(forward(X).cpu().numpy(), train_set.t)
    out.test_accuracy = mlp.accuracy(out.test_outputs, test.t)
    # Steady state, after the accuracy is taken (these steps go on training on batch 0).
    stats = time_step(lambda: step(0))
    out.timed_by(stats)
    out.own_step_us = 1e3 * stats.own_median_ms if stats.own_median_ms is not None else None

    def local_step() -> None:
        with model.no_sync():  # DDP skips its allreduce: the step's compute alone
            step(0)
    out.compute_us = 1e3 * time_step(local_step).median_ms
    out.train_seconds = sum(out.samples_s) * steps_per_epoch
    return out
