"""What a GPU is and what it can do in theory: limits, peaks, and occupancy.

Pure Python, so the arithmetic is tested on machines without a GPU. The CUDA backend fills a
DeviceInfo from the driver's attributes; `for_arch` gives the documented limits of an architecture
so a case can be refused (too many threads, too much shared memory) before anything is compiled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# FP32 lanes per SM by compute capability (CUDA C Programming Guide, "Arithmetic Instructions").
_FP32_LANES = {(6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128,
               (8, 9): 128, (9, 0): 128, (10, 0): 128, (10, 3): 128, (12, 0): 128, (12, 1): 128}


def fp32_lanes_per_sm(cc: tuple[int, int]) -> int:
    return _FP32_LANES.get(tuple(cc), 128 if cc[0] >= 8 else 64)


# Dense TF32 tensor-core FLOPs per SM per clock, from each architecture's whitepaper figures
# divided by SMs x clock: A100 156 TFLOP/s = 108 x 1024 x 1.41 GHz; A40 74.8 = 84 x 512 x 1.74;
# L40 90.5 = 142 x 256 x 2.49; H100 SXM 494.7 = 132 x 2048 x 1.83 (NVIDIA quotes tensor figures at
# 1830 MHz, FP32 at 1980); B200 ~4096. Volta and Turing have no TF32: 0. Unknown: None.
_TF32_FLOPS_PER_SM_CLOCK = {(7, 0): 0, (7, 5): 0, (8, 0): 1024, (8, 6): 512, (8, 7): 512, (8, 9): 256,
                            (9, 0): 2048, (10, 0): 4096}


def tf32_flops_per_sm_clock(cc: tuple[int, int]) -> int | None:
    return _TF32_FLOPS_PER_SM_CLOCK.get(tuple(cc))


# A variant's arithmetic, as the registry states it, and the ceiling its %peak is taken against.
FFMA, TF32X3, TF32, FP64, HOST = "FP32 FFMA", "3xTF32", "TF32", "FP64", "FP32 host"
PRECISIONS = (FFMA, TF32X3, TF32, FP64, HOST)


@dataclass
class DeviceInfo:
    name: str
    cc: tuple[int, int]
    sm_count: int
    sm_clock_mhz: float  # the maximum (boost) clock the driver reports
    mem_clock_mhz: float
    bus_width_bits: int
    mem_bytes: int
    l2_bytes: int
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    smem_per_sm: int = 233472
    smem_per_block: int = 49152  # static limit; more needs the opt-in dynamic attribute
    smem_per_block_optin: int = 232448
    reserved_smem_per_block: int = 1024
    warp_size: int = 32

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    @property
    def fp32_peak_flops(self) -> float:
        """FMA = 2 FLOPs per lane per clock at the maximum SM clock."""
        return self.sm_count * fp32_lanes_per_sm(self.cc) * 2 * self.sm_clock_mhz * 1e6

    @property
    def tf32_peak_flops(self) -> float | None:
        """Dense TF32 tensor-core FLOPs per SM per clock x SMs at the maximum SM clock (the FP32
        peak's clock; the datasheet's tensor figures use a lower one on H100, see above)."""
        per = tf32_flops_per_sm_clock(self.cc)
        return self.sm_count * per * self.sm_clock_mhz * 1e6 if per else None

    def peak_flops(self, precision: str | None) -> float | None:
        """The ceiling for a kernel of `precision`: FFMA the FP32 pipe's, TF32 the tensor cores',
        3xTF32 a third of that (three tensor-core products per product). None where nnbench has
        no figure (FP64, the host)."""
        if precision == FFMA:
            return self.fp32_peak_flops
        tf32 = self.tf32_peak_flops
        if precision == TF32:
            return tf32
        if precision == TF32X3:
            return tf32 / 3 if tf32 else None
        return None

    @property
    def dram_peak_bytes(self) -> float:
        """Double data rate: two transfers per memory clock across the bus."""
        return 2 * self.mem_clock_mhz * 1e6 * self.bus_width_bits / 8

    def stride_blocks(self, total: int, threads: int = 256) -> int:
        """Blocks for a grid-stride loop over `total` items: enough for one item per thread, at most
        8 per SM (more only adds scheduling; each thread then takes several items)."""
        return max(1, min(-(-total // threads), 8 * self.sm_count))

    def as_dict(self) -> dict:
        d = asdict(self)
        d["arch"] = self.arch
        d["fp32_peak_tflops"] = self.fp32_peak_flops / 1e12
        d["tf32_peak_tflops"] = self.tf32_peak_flops / 1e12 if self.tf32_peak_flops else None
        d["dram_peak_gbs"] = self.dram_peak_bytes / 1e9
        return d


# Documented per-architecture limits, for validating a case before a device is opened.
_ARCH_LIMITS = {
    "sm_80": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, smem_per_sm=167936, smem_per_block_optin=166912),
    "sm_86": dict(max_threads_per_sm=1536, max_blocks_per_sm=16, smem_per_sm=102400, smem_per_block_optin=101376),
    "sm_89": dict(max_threads_per_sm=1536, max_blocks_per_sm=24, smem_per_sm=102400, smem_per_block_optin=101376),
    "sm_90": dict(max_threads_per_sm=2048, max_blocks_per_sm=32, smem_per_sm=233472, smem_per_block_optin=232448),
}


def for_arch(arch: str) -> DeviceInfo:
    """A DeviceInfo with an architecture's documented limits (no clocks): for checks, not peaks."""
    family = arch.removesuffix("a")  # sm_90a: Hopper's arch-specific instructions on sm_90's limits
    cc = (int(family[3:-1]), int(family[-1]))
    return DeviceInfo(name=arch, cc=cc, sm_count=0, sm_clock_mhz=0, mem_clock_mhz=0, bus_width_bits=0,
                      mem_bytes=0, l2_bytes=0, **_ARCH_LIMITS.get(family, {}))


@dataclass
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float  # active warps / maximum warps per SM
    limiter: str  # "threads", "blocks", "registers" or "shared memory"


def occupancy(dev: DeviceInfo, threads: int, regs_per_thread: int, smem_bytes: int) -> Occupancy:
    """Theoretical occupancy, as the CUDA occupancy calculator computes it.

    Registers are allocated per warp in units of 256; shared memory per block in units of 128
    bytes plus the per-block reservation (1 KiB on sm_80 and later). The limiter is the resource
    that allows the fewest resident blocks (ties resolved in the order listed).
    """
    warps = -(-threads // dev.warp_size)
    max_warps = dev.max_threads_per_sm // dev.warp_size
    limits = {"threads": max_warps // warps, "blocks": dev.max_blocks_per_sm}
    if regs_per_thread > 0:
        regs_per_warp = -(-regs_per_thread * dev.warp_size // 256) * 256
        limits["registers"] = (dev.regs_per_sm // regs_per_warp) // warps
    if smem_bytes > 0:
        per_block = -(-(smem_bytes + dev.reserved_smem_per_block) // 128) * 128
        limits["shared memory"] = dev.smem_per_sm // per_block
    limiter = min(limits, key=lambda k: limits[k])
    blocks = limits[limiter]
    return Occupancy(blocks, blocks * warps, blocks * warps / max_warps, limiter)

INSTALL_HINT = ("with an NVIDIA GPU and the CUDA toolkit, `bash scripts/setup` installs PyCUDA (the extra "
                "`pip install -e '.[gpu]'`)")

# What a command compiles for without a GPU (--arch picks another): the GPU a run most likely meets.
NO_GPU_ARCH = "sm_90"
