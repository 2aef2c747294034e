"""Data-parallel plumbing: the MPI world, starting it, and the gradient exchanges.

One MPI rank per GPU (or per CPU process on the NumPy backend). `world()` says whether this process
is one rank of several (started by mpirun, mpiexec or srun); `launch()` starts the ranks when the
user asked for several and nnbench was not started under MPI. Ranks are started through
`python -m mpi4py`, whose handler aborts the whole job when any rank raises, so a dying rank never
leaves the others waiting in a collective.

Exchanges sum a flat float32 gradient across the ranks, in place:
  MpiHostExchange  the seed's path: device -> host, MPI_Allreduce, host -> device;
  NcclExchange     NCCL's allreduce on the device buffer (CuPy's binding): either once after the
                   backward pass on the default stream that every nnbench launch uses (one bucket),
                   or bucket by bucket on a side stream while the backward pass goes on (buckets);
  CpuExchange      MPI_Allreduce on a NumPy array (the CPU backend), one non-blocking call a bucket.

Buckets (as PyTorch DDP's): the layers, in the order the backward pass makes their gradients (the
last layer first), grouped into runs of at most `cap` floats (`plan_buckets`). The flat buffer holds
the layers in order, so each bucket is one contiguous range of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from nnbench.errors import NnbenchError

SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS", "MPI_LOCALNRANKS")
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK")
EXCHANGES = ("nccl", "mpi")


@dataclass
class World:
    comm: object  # mpi4py's COMM_WORLD
    rank: int
    size: int
    local_rank: int

    def sum(self, value: float) -> float:
        return float(self.comm.allreduce(value))

    def max(self, value: float) -> float:
        """The ranks' largest `value` (measure.measure_collective's agreement)."""
        return float(max(self.comm.allgather(value)))

    def min(self, value: float) -> float:
        return float(min(self.comm.allgather(value)))

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int) -> None:
        self.comm.Abort(code)


def started_size() -> int:
    """How many ranks the launcher started, from its environment (1 when not under MPI)."""
    for var in SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def world() -> World | None:
    """This rank's world, or None when nnbench runs as a single process."""
    if started_size() <= 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        raise NnbenchError("started under MPI, but mpi4py is not installed: pip install mpi4py") from None
    comm = MPI.COMM_WORLD
    local = next((int(os.environ[v]) for v in LOCAL_RANK_VARS if os.environ.get(v, "").isdigit()), None)
    if local is None:
        local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    return World(comm, comm.Get_rank(), comm.Get_size(), local)


def launch(ranks: int, argv: list[str]) -> int:
    """Run `nnbench argv` as `ranks` MPI ranks through mpirun; returns mpirun's exit code."""
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        raise NnbenchError(f"--gpus {ranks}: needs mpirun or mpiexec on PATH (Open MPI or MPICH), "
                           "or start nnbench under mpirun/srun yourself")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        raise NnbenchError(f"--gpus {ranks}: needs mpi4py (pip install mpi4py)") from None
    cmd = [mpirun, "-np", str(ranks)]
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        cmd += ["--oversubscribe"]  # CPU ranks may outnumber cores (CI: 4 ranks on 2 cores)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd += ["--allow-run-as-root"]
    cmd += [sys.executable, "-m", "mpi4py", "-m", "nnbench", *argv]
    return subprocess.run(cmd).returncode


DEFAULT_BUCKET_MB = 2.0  # --bucket-mb: Net 8's hidden layers are 1 MB each, two a bucket (lab/journal/multigpu.md)


def bucket_floats(mb: float) -> int:
    """A bucket's cap in float32s; 0 (from --bucket-mb 0): one bucket after the backward pass."""
    return int(mb * (1 << 20)) // 4


def plan_buckets(sizes: list[int], cap: int) -> list[list[int]]:
    """Layer indices (into `sizes`, floats per layer) grouped into buckets, in the order the backward
    pass finishes them: the last layer first, consecutive layers together while a bucket holds at
    most `cap` floats (a layer larger than `cap` is a bucket of its own). cap <= 0: one bucket."""
    order = list(range(len(sizes) - 1, -1, -1))
    if cap <= 0:
        return [order] if order else []
    out: list[list[int]] = []
    held = 0
    for layer in order:
        if out and held + sizes[layer] <= cap:
            out[-1].append(layer)
            held += sizes[layer]
        else:
            out.append([layer])
            held = sizes[layer]
    return out


def bucket_range(offsets, bucket: list[int]) -> tuple[int, int]:
    """(first float, floats) of a bucket in the flat buffer whose layer l starts at offsets[l]."""
    lo, hi = min(bucket), max(bucket)
    return int(offsets[lo]), int(offsets[hi + 1] - offsets[lo])


class CpuExchange:
    name = "mpi"

    def __init__(self, w: World) -> None:
        from mpi4py import MPI
        self.w, self.MPI = w, MPI

    def allreduce(self, flat: np.ndarray) -> None:
        self.w.comm.Allreduce(self.MPI.IN_PLACE, flat, op=self.MPI.SUM)

    def start(self, part: np.ndarray):
        """A non-blocking sum of `part` (a contiguous view of the flat buffer) in place; wait() on
        the request before reading it."""
        return self.w.comm.Iallreduce(self.MPI.IN_PLACE, part, op=self.MPI.SUM)


class MpiHostExchange:
    """The seed's exchange: the gradient goes to pinned host memory, through MPI_Allreduce, and back.
    Synchronous, so always one bucket."""

    name = "mpi"
    stream = None  # its copies wait for the default stream; nothing to overlap

    def __init__(self, w: World, backend, count: int) -> None:
        import pycuda.driver as drv
        from mpi4py import MPI
        self.w, self.MPI, self.drv = w, MPI, drv
        self.host = drv.pagelocked_empty(count, np.float32)

    def launcher(self, buf, count: int):
        host, drv, comm, MPI = self.host[:count], self.drv, self.w.comm, self.MPI

        def run():
            drv.memcpy_dtoh(host, buf)  # synchronous: waits for the gradient kernels
            comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
            drv.memcpy_htod(buf, host)
        return run


class NcclExchange:
    """NCCL allreduce through CuPy's binding, on nnbench's device buffer and the legacy default
    stream (stream 0), where PyCUDA issues every kernel: ordered after the gradients, before the
    updates, without a host synchronization."""

    name = "nccl"

    def __init__(self, w: World, backend, count: int) -> None:
        try:
            import cupy
            from cupy.cuda import nccl
            cupy.cuda.Device(backend.ordinal).use()  # the communicator lives on this rank's GPU
        except ImportError as e:
            raise NnbenchError(f"--allreduce nccl: CuPy's NCCL binding is not available ({e}); "
                               "use --allreduce mpi") from None
        uid = nccl.get_unique_id() if w.rank == 0 else None
        uid = w.comm.bcast(uid, root=0)
        self.w, self.nccl = w, nccl
        self.comm = nccl.NcclCommunicator(w.size, uid, w.rank)
        self.cupy = cupy
        self._stream = None  # the side stream, made on first use (one-bucket runs never make it)

    def launcher(self, buf, count: int):
        comm, nccl, ptr = self.comm, self.nccl, int(buf)
        return lambda: comm.allReduce(ptr, ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)

    # -- buckets on a side stream ---------------------------------------------------------------
    @property
    def stream(self):
        """The side stream (PyCUDA, non-blocking: the legacy default stream does not wait for it,
        nor it for the default stream) where the buckets' passes and allreduces run."""
        if self._stream is None:
            import pycuda.driver as drv
            self._stream = drv.Stream(flags=1)  # CU_STREAM_NON_BLOCKING
            self._side = self.cupy.cuda.ExternalStream(self._stream.handle)
        return self._stream

    def _side_stream(self):
        """The side stream as CuPy sees it (for events)."""
        return self.stream and self._side

    def _event(self):
        return self.cupy.cuda.Event(block=False, disable_timing=True, interprocess=False)

    def handoff(self):
        """A callable that makes the side stream wait for everything issued on the default stream
        so far (a bucket's gradients), without stopping the default stream."""
        side, null, event = self._side_stream(), self.cupy.cuda.Stream.null, self._event()

        def run():
            event.record(null)
            side.wait_event(event)
        return run

    def join(self):
        """A callable that makes the default stream wait for the side stream's work so far (every
        bucket's allreduce and update, before the next step's forward pass reads the weights)."""
        side, null, event = self._side_stream(), self.cupy.cuda.Stream.null, self._event()

        def run():
            event.record(side)
            null.wait_event(event)
        return run

    def side_launcher(self, buf, count: int):
        """NCCL's allreduce of `count` floats at device address `buf`, on the side stream."""
        comm, nccl, ptr, handle = self.comm, self.nccl, int(buf), self.stream.handle
        return lambda: comm.allReduce(ptr, ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, handle)


def gpu_exchange(kind: str, w: World, backend, count: int):
    if kind not in EXCHANGES:
        raise NnbenchError(f"--allreduce {kind}: choose from {', '.join(EXCHANGES)}")
    return NcclExchange(w, backend, count) if kind == "nccl" else MpiHostExchange(w, backend, count)
