"""Every device spin loop gives up: a kernel whose blocks wait for one another reads the clock
while it waits (common/patience.cuh), and on the GPU a partner that never arrives ends in a clean
error instead of a hang."""

import re
import subprocess
import time

import numpy as np
import pytest

from nnbench import paths
from nnbench.errors import KernelFault
from nnbench.profiling import ceilings
from nnbench.runtime.compile import CompileRequest, compile_cubin

# Kernels that wait for other blocks, by file: each must read %globaltimer while it waits.
WAITERS = {"common/ceilings.cu": ["handoff", "grid_barrier"], "common/blocking.cu": ["block_stream"],
           "mlp/07_fused.cu": ["fused_train"], "mlp/09_fused_columns.cu": ["fused_train"]}


def ptx_functions(source: str) -> dict[str, str]:
    """Each .entry and .func of the source's PTX (sm_90) by name, with its body."""
    out = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", f"-I{paths.KERNELS}", "-o", "-",
                          str(paths.KERNELS / source)], capture_output=True, text=True, check=True).stdout
    parts = re.split(r"^(?:\.visible |\.weak )?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)", out, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def reads_clock(name: str, funcs: dict[str, str], seen: set | None = None) -> bool:
    """Whether `name` or a function it calls reads %globaltimer."""
    seen = seen if seen is not None else set()
    body = funcs.get(name, "")
    if "%globaltimer" in body:
        return True
    seen.add(name)
    return any(reads_clock(c, funcs, seen) for c in re.findall(r"call(?:\.uni)?\s*(?:\([^)]*\),\s*)?(\w+)", body)
               if c not in seen)


@pytest.mark.parametrize("source", sorted(WAITERS))
def test_every_waiting_kernel_reads_the_clock(source):
    funcs = ptx_functions(source)
    for kernel in WAITERS[source]:
        assert kernel in funcs, (source, kernel, sorted(funcs))
        assert reads_clock(kernel, funcs), f"{source}: {kernel} waits for other blocks with no timeout"


@pytest.mark.gpu
def test_a_partner_that_never_arrives_is_a_clean_timeout(cuda_backend):
    be = cuda_backend
    comp = compile_cubin(CompileRequest.make(paths.KERNELS / "common/ceilings.cu", {"CHAINS": ceilings.CHAINS},
                                             be.arch))
    timeout_ns = 50_000_000
    status = be.upload(np.zeros(1, np.int32))
    handoff = be.load(comp, "handoff")
    box = be.upload(np.zeros(1, np.uint64))
    t0 = time.perf_counter()
    # one block: block 0 waits for the odd values block 1 would send, and block 1 does not exist
    be.launch(handoff, (1, 1, 1), (32, 1, 1), (box, np.int32(10), status, np.int64(timeout_ns)))
    with pytest.raises(KernelFault, match="never arrived"):
        ceilings.gave_up(be, status, "handoff", timeout_ns)
    barrier = be.load(comp, "grid_barrier")
    be.write(status, np.zeros(1, np.int32))
    count = be.upload(np.array([0xC0000000], np.uint32))  # 2^30 arrivals short of every round: never met
    be.launch(barrier, (4, 1, 1), (128, 1, 1), (count, np.int32(3), status, np.int64(timeout_ns)))
    with pytest.raises(KernelFault, match="never arrived"):
        ceilings.gave_up(be, status, "grid_barrier", timeout_ns)
    assert time.perf_counter() - t0 < 5  # two timeouts of 50 ms, not a hang
    # the context survives: a real handoff between two blocks completes without giving up
    be.write(status, np.zeros(1, np.int32))
    be.write(box, np.zeros(1, np.uint64))
    be.launch(handoff, (2, 1, 1), (32, 1, 1), (box, np.int32(10), status, np.int64(timeout_ns)))
    ceilings.gave_up(be, status, "handoff", timeout_ns)
    assert int(be.download(box, np.zeros(1, np.uint64))[0]) == 20
