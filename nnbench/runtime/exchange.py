"""Data-parallel plumbing: the MPI world, starting it, and the gradient exchanges.

One MPI rank per GPU (or per CPU process on the NumPy backend). `world()` says whether this process
is one rank of several (started by mpirun, mpiexec or srun); `launch()` starts the ranks when the
user asked for several and nnbench was not started under MPI. Ranks are started through
`python -m mpi4py`, whose handler aborts the whole job when any rank raises, so a dying rank never
leaves the others waiting in a collective.

Exchanges sum a flat float32 gradient across the ranks, in place:
  MpiHostExchange  the seed's path: device -> host, MPI_Allreduce, host -> device;
  NcclExchange     NCCL's allreduce on the device buffer (CuPy's binding), on the default stream
                   that every nnbench launch uses, so it is ordered after the gradient kernels;
  CpuExchange      MPI_Allreduce on a NumPy array (the CPU backend).
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


class CpuExchange:
    name = "mpi"

    def __init__(self, w: World) -> None:
        from mpi4py import MPI
        self.w, self.MPI = w, MPI

    def allreduce(self, flat: np.ndarray) -> None:
        self.w.comm.Allreduce(self.MPI.IN_PLACE, flat, op=self.MPI.SUM)


class MpiHostExchange:
    """The seed's exchange: the gradient goes to pinned host memory, through MPI_Allreduce, and back."""

    name = "mpi"

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

    def launcher(self, buf, count: int):
        comm, nccl, ptr = self.comm, self.nccl, int(buf)
        return lambda: comm.allReduce(ptr, ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0)


def gpu_exchange(kind: str, w: World, backend, count: int):
    if kind not in EXCHANGES:
        raise NnbenchError(f"--allreduce {kind}: choose from {', '.join(EXCHANGES)}")
    return NcclExchange(w, backend, count) if kind == "nccl" else MpiHostExchange(w, backend, count)
