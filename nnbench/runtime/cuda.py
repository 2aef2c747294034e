"""The CUDA backend: PyCUDA on the device's primary context.

Using the primary context (not `pycuda.autoinit`, which creates a private one) is what lets CuPy
and PyTorch, which both use the primary context, see the same allocations: the cuBLAS baseline
runs on nnbench's buffers without a copy.

Kernels are compiled by `runtime.compile` (our nvcc call and content-addressed cache) and loaded
with `module_from_buffer`; that is what PyCUDA's SourceModule does inside, minus its private cache.
"""

from __future__ import annotations

import atexit
import functools
import gc
import weakref
from dataclasses import dataclass

import numpy as np

from nnbench import paths
from nnbench.errors import BackendUnavailable, KernelFault, NnbenchError, QueueFull
from nnbench.measure import rel_err_from_sums
from nnbench.runtime.backend import Backend
from nnbench.runtime.compile import Compiled, CompileRequest, compile_cubin, nvcc_version
from nnbench.runtime.device import INSTALL_HINT, DeviceInfo, occupancy
from nnbench.runtime.nvml import Nvml
from nnbench.runtime.params import driver_offsets, has_raw, param_count, param_format

try:
    import pycuda.driver as drv
except ImportError as e:  # pragma: no cover - exercised on machines without PyCUDA
    raise BackendUnavailable(f"PyCUDA is not installed: {INSTALL_HINT}") from e

NAN_BITS = 0x7FC00000  # a quiet float32 NaN, for memset_d32
DEFAULT_DYNAMIC_SMEM = 48 * 1024  # what a launch may use before the opt-in attribute


@dataclass
class KernelInfo:
    """What the driver says about one loaded kernel, plus occupancy for its launch."""

    registers: int
    smem_bytes: int
    local_bytes: int  # per-thread local memory: spills and stack arrays
    max_threads: int


class Kernel:
    def __init__(self, module, func, info: KernelInfo, cubin: bytes = b"", name: str = "") -> None:
        self.module, self.func, self.info = module, func, info
        self.cubin, self.name = cubin, name
        self._offsets: list[int] | None = None
        self._signature: str | None = None

    def prepare(self, signature: str) -> None:
        """Give PyCUDA the struct format of a prepared call. The function holds one format, so it is set
        again only when the signature changes (a kernel has one), not once per bound launch."""
        if signature != self._signature:
            self.func.prepare(param_format(signature, self.param_offsets(signature) if has_raw(signature) else None))
            self._signature = signature

    def sibling(self, name: str) -> Kernel:
        """Another kernel of the same module (a helper pass that ships in the same .cu file)."""
        return Kernel(self.module, self.module.get_function(name), self.info, self.cubin, name)

    def param_offsets(self, signature: str) -> list[int]:
        """Where each parameter starts in the kernel's parameter buffer, as the driver reads the
        cubin (cuFuncGetParamInfo): the truth that a raw by-value parameter's padding must match."""
        if self._offsets is None:
            self._offsets = driver_offsets(self.cubin, self.name, param_count(signature))
        return self._offsets


def _dims(d) -> tuple[int, int, int]:
    """A grid or block as the driver takes it: three Python ints (a NumPy integer is no C unsigned to PyCUDA)."""
    return int(d[0]), int(d[1]) if len(d) > 1 else 1, int(d[2]) if len(d) > 2 else 1


class CudaBackend(Backend):
    name = "cuda"
    runs_kernels = True
    has_vendor_libs = True
    clock_name = "CUDA events"
    device = None  # the DeviceInfo, set once the driver answers

    def __init__(self, ordinal: int = 0) -> None:
        try:
            drv.init()
            count = drv.Device.count()
        except drv.Error as e:
            raise BackendUnavailable(f"CUDA driver not usable ({e}): {INSTALL_HINT}") from None
        if count == 0:
            raise BackendUnavailable(f"no CUDA GPU found: {INSTALL_HINT}")
        if not 0 <= ordinal < count:
            raise BackendUnavailable(f"--device {ordinal}: this machine has GPUs 0..{count - 1}")
        self.ordinal = ordinal
        self.dev = drv.Device(ordinal)
        self.ctx = self.dev.retain_primary_context()
        self.ctx.push()
        atexit.register(self.close)
        self.device = device_info(self.dev)
        self._flush = None
        self._verifier = None
        self._ratio = None
        self._blocking = None
        self._syncing: dict[int, object] = {}  # launches that synchronize inside, kept alive by id
        self._room: dict[int, tuple[object, int]] = {}  # id -> (launch, queued launches that fit), learned
        self._graphs = weakref.WeakSet()  # destroyed in close(), while the context is still current
        self._nvml = Nvml(self.dev.pci_bus_id())

    def close(self) -> None:
        gc.collect()  # free device buffers while the context is still current
        for g in list(self._graphs):
            g.close()
        try:
            self.ctx.pop()
        except drv.Error:
            pass

    @property
    def arch(self) -> str:
        return self.device.arch

    def environment(self) -> dict:
        d = self.device
        return {
            "backend": "cuda", "gpu": d.name, "device_index": self.ordinal, "gpu_uuid": self._nvml.uuid(),
            "cc": f"{d.cc[0]}.{d.cc[1]}", "sms": d.sm_count,
            "driver": self._nvml.driver_version() or _fmt_cuda_version(drv.get_driver_version()),
            "cuda": _fmt_cuda_version(drv.get_driver_version()), "nvcc": nvcc_version(),
            "device_name": d.name, "max_sm_clock_mhz": d.sm_clock_mhz,
            "fp32_peak_tflops": d.fp32_peak_flops / 1e12, "dram_peak_gbs": d.dram_peak_bytes / 1e9,
            "tf32_peak_tflops": d.tf32_peak_flops / 1e12 if d.tf32_peak_flops else None,
        }

    def free_memory(self) -> int:
        """Device bytes free now (nnbench.memory checks a problem against it before allocating)."""
        return drv.mem_get_info()[0]

    # -- kernels ------------------------------------------------------------------------------
    def load(self, compiled: Compiled, name: str) -> Kernel:
        cubin = compiled.cubin.read_bytes()
        module = drv.module_from_buffer(cubin)
        func = module.get_function(name)
        fa = drv.function_attribute
        info = KernelInfo(
            registers=func.get_attribute(fa.NUM_REGS),
            smem_bytes=func.get_attribute(fa.SHARED_SIZE_BYTES),
            local_bytes=func.get_attribute(fa.LOCAL_SIZE_BYTES),
            max_threads=func.get_attribute(fa.MAX_THREADS_PER_BLOCK),
        )
        return Kernel(module, func, info, cubin, name)

    def symbol(self, kernel: Kernel, name: str) -> int:
        """The device address of a module's global (a `__constant__` bank), for `copy` to fill."""
        address, _ = kernel.module.get_global(name)
        return int(address)

    def allow_dynamic_smem(self, kernel: Kernel, nbytes: int) -> None:
        """Let launches of `kernel` ask for `nbytes` of dynamic shared memory (above 48 KiB needs this)."""
        kernel.func.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)

    def occupancy(self, kernel: Kernel, threads: int, dynamic_smem: int = 0):
        return occupancy(self.device, threads, kernel.info.registers, kernel.info.smem_bytes + dynamic_smem)

    def bind(self, kernel: Kernel, grid, block, args: tuple, signature: str | None = None, *, smem: int = 0,
             stream=None):
        """A no-argument callable that launches the kernel. With a `signature` (which may hold raw by-value
        parameters, `params.raw`, whose arguments are bytes) the call is prepared once, so the per-launch
        Python cost is one prepared call (about 5 us on the H100 host here); without one, PyCUDA reads the
        arguments' types at each launch. `smem`: dynamic shared memory, raised past the 48 KiB default where
        the kernel asks for more. `stream` (a PyCUDA Stream): launch there instead of the default stream (a
        data-parallel step's side stream)."""
        grid3, block3, smem = _dims(grid), _dims(block), int(smem)
        if smem > DEFAULT_DYNAMIC_SMEM:
            self.allow_dynamic_smem(kernel, smem)
        func = kernel.func
        if signature is None:
            return functools.partial(func, *args, block=block3, grid=grid3, shared=smem, stream=stream)
        kernel.prepare(signature)
        if stream is not None:
            return functools.partial(func.prepared_async_call, grid3, block3, stream, *args, shared_size=smem)
        if smem:
            return functools.partial(func.prepared_call, grid3, block3, *args, shared_size=smem)
        return functools.partial(func.prepared_call, grid3, block3, *args)

    def launch(self, kernel: Kernel, grid, block, args: tuple, signature: str | None = None, *, smem: int = 0,
               stream=None) -> None:
        self.bind(kernel, grid, block, args, signature, smem=smem, stream=stream)()

    def capture(self, fn, streams=()):
        """`fn`'s launches as one CUDA graph (runtime/graph.py), replayed by calling the result on the
        default stream. Every PyCUDA launch that names no stream (`launch` and `bind`, prepared or not) goes
        to the capture stream meanwhile and is counted, so the graph must hold exactly that many kernels.
        `streams` are callables that point a library's own launches (cuBLAS) at a stream handle and back
        (None): with them the count is unknown and the capture relaxed, since a library may allocate its
        workspace inside."""
        from nnbench.runtime import graph
        stream = drv.Stream()  # blocking: see graph.py for why
        launches = [0]
        original = drv.Function._launch_kernel

        def routed(func, grid, block, args, shared, s):
            launches[0] += 1
            return original(func, grid, block, args, shared, stream if s is None else s)

        def issue():
            drv.Function._launch_kernel = routed
            try:
                for point in streams:
                    point(stream.handle)
                fn()
            except (KernelFault, NnbenchError):
                raise
            except Exception as e:  # noqa: BLE001 - a library refusing the capture: this graph's failure alone
                raise KernelFault(f"capturing the graph failed: {type(e).__name__}: {e}") from e
            finally:
                drv.Function._launch_kernel = original
                for point in streams:
                    point(None)
            return None if streams else launches[0]

        g = graph.capture(stream.handle, issue, graph.RELAXED if streams else graph.GLOBAL)
        g.stream = stream  # kept alive with the graph
        self._graphs.add(g)
        return g

    # -- memory -------------------------------------------------------------------------------
    def upload(self, host: np.ndarray):
        buf = drv.mem_alloc(max(host.nbytes, 4))
        drv.memcpy_htod(buf, np.ascontiguousarray(host) if host.flags.c_contiguous else np.asfortranarray(host))
        return buf

    def alloc(self, nbytes: int):
        """An uninitialised device buffer."""
        return drv.mem_alloc(max(nbytes, 4))

    def write(self, buf, host: np.ndarray) -> None:
        drv.memcpy_htod(buf, host)

    def copy(self, dst, src, nbytes: int) -> None:
        drv.memcpy_dtod(dst, src, nbytes)

    def fill_nan(self, buf, count: int) -> None:
        drv.memset_d32(buf, NAN_BITS, count)

    def download(self, buf, like: np.ndarray) -> np.ndarray:
        out = np.empty_like(like)
        drv.memcpy_dtoh(out, buf)
        return out

    def rel_err(self, out, ref, count: int) -> float:
        """||out - ref|| / ||ref|| for float32 `out` against a float64 `ref` already on the device,
        reduced on the GPU (kernels_cu/common/verify.cu) so C never has to come back to the host."""
        func, acc = self._verify_kernel()
        drv.memset_d32(acc, 0, 4)
        blocks = self.device.stride_blocks(count)
        func.prepared_call((blocks, 1, 1), (256, 1, 1), int(out), int(ref), np.int32(count), int(acc))
        sums = np.empty(2, dtype=np.float64)
        try:
            drv.memcpy_dtoh(sums, acc)
        except drv.Error as e:
            raise KernelFault(str(e)) from None
        return rel_err_from_sums(float(sums[0]), float(sums[1]))

    def conditioned_error(self, out, ref, magnitude, count: int) -> float:
        """measure.conditioned_error for float32 `out` against a float64 `ref` and `magnitude` already on the
        device, reduced on the GPU (kernels_cu/common/verify.cu, max_ratio)."""
        if self._ratio is None:
            comp = compile_cubin(CompileRequest.make(paths.KERNELS / "common/verify.cu", {}, self.arch))
            kernel = self.load(comp, "max_ratio")
            kernel.func.prepare("PPPiP")
            self._ratio = (kernel.func, drv.mem_alloc(8))
        func, acc = self._ratio
        drv.memset_d32(acc, 0, 2)
        func.prepared_call((self.device.stride_blocks(count), 1, 1), (256, 1, 1), int(out), int(ref), int(magnitude),
                           np.int32(count), int(acc))
        worst = np.empty(1, dtype=np.float64)
        try:
            drv.memcpy_dtoh(worst, acc)  # the bits of the largest ratio, read back as the double they are
        except drv.Error as e:
            raise KernelFault(str(e)) from None
        return float(worst[0])

    def _verify_kernel(self):
        if self._verifier is None:
            comp = compile_cubin(CompileRequest.make(paths.KERNELS / "common/verify.cu", {}, self.arch))
            kernel = self.load(comp, "sq_err")
            kernel.func.prepare("PPiP")
            self._verifier = (kernel.func, drv.mem_alloc(16))
        return self._verifier

    def prime(self) -> None:
        """Compile (on a cold cache: nvcc, about a second) and load the two helper kernels every case
        uses, the verifier and the blocking kernel, before the first case instead of inside it. A
        sweep's worker calls this while its parent compiles the sweep's kernels."""
        self._verify_kernel()
        self._blocker()

    def ptr(self, buf) -> int:
        return int(buf)

    def synchronize(self) -> None:
        try:
            self.ctx.synchronize()
        except drv.Error as e:
            raise KernelFault(str(e)) from None

    # -- timing -------------------------------------------------------------------------------
    MAX_QUEUED = 512  # launches queued behind the blocking kernel; the driver's queue holds ~1,000
    BLOCK_TIMEOUT_NS = 200_000_000  # Python queues 512 launches in a few ms; 200 ms means a sync inside

    def timed(self, fn, reps: int, during=None) -> float:
        """Milliseconds per launch over `reps` back-to-back launches between two CUDA events, as
        the host issues them: for warm-up and estimates, and for launches that synchronize.
        `during()` (an NVML probe) is called once the launches are issued, while the GPU may still
        run them and the host would only wait."""
        start, end = drv.Event(), drv.Event()
        try:
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            if during is not None:
                during()
            end.synchronize()
        except drv.Error as e:
            raise KernelFault(str(e)) from None
        return start.time_till(end) / reps

    def timed_samples(self, fn, reps: int, count: int, during=None, collective: bool = False) -> list[float]:
        """`count` samples of `reps` launches each, all queued behind the blocking kernel
        (kernels_cu/common/blocking.cu) and then released: the GPU runs the samples back to back,
        each between its own pair of events, so neither host launch latency nor the host's work
        between samples is ever timed. `during()` (the clock probe) is called once the batch is
        released, while the GPU runs it and the host would only wait.

        The blocking kernel's timeout has two causes, told apart by one launch queued alone: a launch
        that synchronizes inside (never blocked again: its samples are issued by the host), or a batch
        that filled the driver's queue (about 1,000 entries, and `fn` may queue several kernels and
        memsets: the unroll convolutions' 0.5 ms samples did, lab/journal/measurement.md). Then the
        host waited inside a launch until the timeout let the stream go, so the batch is void: the
        room for `fn` is halved (queue_room) and QueueFull raised, for the caller to fit its batch.
        A `collective` launch is never queued alone to tell the two apart (its lone collective would wait
        for the other ranks' matching call, forever): its void batch raises QueueFull at once, and the
        ranks agree what next (measure.measure_collective)."""
        room = self.queue_room(fn)
        if count * (reps + 2) > room:
            raise ValueError(f"at most {room} queued launches per batch, got {count} x {reps}")
        if id(fn) in self._syncing:
            return self._host_issued(fn, reps, count, during)
        events = [(drv.Event(), drv.Event()) for _ in range(count)]
        if not self._released(fn, events, reps, during):
            if collective:
                raise QueueFull(f"{count} x {reps} launches of a collective: the blocking kernel timed out")
            if count * reps > 1 and self._released(fn, [(drv.Event(), drv.Event())], 1, None):
                self._room[id(fn)] = (fn, max(3, count * (reps + 2) // 2))
                raise QueueFull(f"{count} x {reps} launches filled the queue; room now {self.queue_room(fn)}")
            self._syncing[id(fn)] = fn  # the blocking kernel gave up: the launch synchronizes; never block it again
            return self._host_issued(fn, reps, count, during)
        return [start.time_till(end) / reps for start, end in events]

    def _released(self, fn, events, reps: int, during) -> bool:
        """Queue each event pair around `reps` launches behind the blocking kernel, release it and wait;
        False if the blocking kernel timed out first (the samples are then void)."""
        flag, block = self._blocker()
        try:
            flag[0] = 0
            block()
            for start, end in events:
                start.record()
                for _ in range(reps):
                    fn()
                end.record()
            if flag[0] == 0:
                flag[0] = 1
            if during is not None:
                during()
            events[-1][1].synchronize()
        except drv.Error as e:
            flag[0] = 1
            raise KernelFault(str(e)) from None
        return flag[0] != 2

    def queue_room(self, fn) -> int:
        """Launches of `fn` (counting each sample's event pair as two) that may be queued behind the blocking
        kernel at once: MAX_QUEUED, or less once a batch of `fn` filled the driver's queue."""
        return self._room[id(fn)][1] if id(fn) in self._room else self.MAX_QUEUED

    def _host_issued(self, fn, reps: int, count: int, during) -> list[float]:
        """The batch's samples one by one; its one probe taken while the first sample runs."""
        return [self.timed(fn, reps, during if i == 0 else None) for i in range(count)]

    def issued_by_host(self, fn) -> bool:
        """Whether `fn` fell back to host-issued timing (its blocking kernel timed out)."""
        return id(fn) in self._syncing

    def _blocker(self):
        if self._blocking is None:
            comp = compile_cubin(CompileRequest.make(paths.KERNELS / "common/blocking.cu", {}, self.arch))
            func = self.load(comp, "block_stream").func
            func.prepare("PQ")
            flag = drv.pagelocked_empty(1, np.int32, mem_flags=drv.host_alloc_flags.DEVICEMAP)
            flag[0] = 1
            ptr = np.intp(flag.base.get_device_pointer())
            timeout_ns = np.uint64(self.BLOCK_TIMEOUT_NS)
            self._blocking = (flag, lambda: func.prepared_call((1, 1, 1), (1, 1, 1), ptr, timeout_ns))
        return self._blocking

    def flush_l2(self) -> None:
        """Overwrite a buffer twice the size of L2 (allocated once), so the next launch starts cold."""
        n = max(2 * self.device.l2_bytes, 8 << 20) // 4
        if self._flush is None:
            self._flush = drv.mem_alloc(n * 4)
        drv.memset_d32(self._flush, 0, n)

    def sm_clock_mhz(self) -> float | None:
        return self._nvml.clock("sm")

    def telemetry(self):
        """NVML's view of this GPU for one `measure` call (nnbench/runtime/nvml.py), or None without NVML."""
        return self._nvml.telemetry()

    @property
    def nvml(self) -> Nvml:
        return self._nvml


def device_count() -> int:
    try:
        drv.init()
        return drv.Device.count()
    except drv.Error:
        return 0


def device_uuid(ordinal: int) -> str | None:
    return device_nvml(ordinal).uuid()


def device_nvml(ordinal: int) -> Nvml:
    return Nvml(drv.Device(ordinal).pci_bus_id())


def device_info(dev) -> DeviceInfo:
    """DeviceInfo from the driver's attributes; needs no context."""
    attrs = {str(k): v for k, v in dev.get_attributes().items()}
    a = lambda name, default=0: attrs.get(name, default)
    nv = Nvml(dev.pci_bus_id())
    # CUDA 13 dropped the clock attributes from the runtime; NVML knows them either way.
    sm_clock = a("CLOCK_RATE") / 1e3 or nv.max_clock("sm") or 0.0
    mem_clock = a("MEMORY_CLOCK_RATE") / 1e3 or nv.max_clock("mem") or 0.0
    return DeviceInfo(
        name=dev.name(), cc=dev.compute_capability(), sm_count=a("MULTIPROCESSOR_COUNT"),
        sm_clock_mhz=sm_clock, mem_clock_mhz=mem_clock, bus_width_bits=a("GLOBAL_MEMORY_BUS_WIDTH"),
        mem_bytes=dev.total_memory(), l2_bytes=a("L2_CACHE_SIZE"),
        max_threads_per_block=a("MAX_THREADS_PER_BLOCK", 1024),
        max_threads_per_sm=a("MAX_THREADS_PER_MULTIPROCESSOR", 2048),
        max_blocks_per_sm=a("MAX_BLOCKS_PER_MULTIPROCESSOR", 32),
        regs_per_sm=a("MAX_REGISTERS_PER_MULTIPROCESSOR", 65536),
        regs_per_block=a("MAX_REGISTERS_PER_BLOCK", 65536),
        smem_per_sm=a("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", 233472),
        smem_per_block=a("MAX_SHARED_MEMORY_PER_BLOCK", 49152),
        smem_per_block_optin=a("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", 49152),
        reserved_smem_per_block=a("RESERVED_SHARED_MEMORY_PER_BLOCK", 1024),
        warp_size=a("WARP_SIZE", 32),
    )


def _fmt_cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"
