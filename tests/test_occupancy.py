"""Theoretical occupancy against hand-worked cases of the CUDA occupancy calculator (sm_90 limits:
2048 threads, 32 blocks, 64K registers and 228 KiB shared memory per SM, 1 KiB reserved per block)."""

import pytest

from nnbench.runtime.device import DeviceInfo, for_arch, occupancy

H100 = for_arch("sm_90")


@pytest.mark.parametrize("threads, regs, smem, blocks, occ, limiter", [
    (256, 32, 0, 8, 1.0, "threads"),            # 8 x 256 = 2048 threads
    (256, 128, 0, 2, 0.25, "registers"),        # 128*32 = 4096 regs/warp -> 16 warps
    (256, 123, 16640, 2, 0.25, "registers"),    # 123 -> 3936 -> 4096 per warp: our warptile step
    (128, 255, 0, 2, 0.125, "registers"),       # 255 -> 8192 per warp -> 8 warps -> 2 blocks of 4
    (64, 16, 0, 32, 1.0, "threads"),            # tie between 32 blocks and 2048 threads: threads first
    (32, 16, 0, 32, 0.5, "blocks"),             # block limit: 32 x 1 warp
    (128, 32, 48 * 1024, 4, 0.25, "shared memory"),  # (48K + 1K) -> 4 per 228K
    (1024, 32, 0, 2, 1.0, "threads"),
])
def test_known_cases(threads, regs, smem, blocks, occ, limiter):
    o = occupancy(H100, threads, regs, smem)
    assert (o.blocks_per_sm, o.occupancy, o.limiter) == (blocks, pytest.approx(occ), limiter)


def test_peaks_from_datasheet_numbers():
    d = DeviceInfo(name="H100 SXM", cc=(9, 0), sm_count=132, sm_clock_mhz=1980, mem_clock_mhz=2619,
                   bus_width_bits=5120, mem_bytes=80 << 30, l2_bytes=50 << 20)
    assert d.fp32_peak_flops / 1e12 == pytest.approx(66.9, abs=0.05)   # 132 * 128 * 2 * 1.98 GHz
    assert d.dram_peak_bytes / 1e9 == pytest.approx(3352, abs=1)       # 2 * 2619 MHz * 5120 bit / 8
    assert d.arch == "sm_90"


def test_stride_blocks():
    from nnbench.runtime.device import DeviceInfo
    dev = DeviceInfo(name="x", cc=(9, 0), sm_count=132, sm_clock_mhz=0, mem_clock_mhz=0, bus_width_bits=0,
                     mem_bytes=0, l2_bytes=0)
    assert dev.stride_blocks(0) == 1 and dev.stride_blocks(257) == 2 and dev.stride_blocks(10**9) == 8 * 132
    assert dev.stride_blocks(1000, threads=100) == 10


def test_an_arch_specific_target_takes_its_familys_limits():
    # `profile --arch sm_90a` without a GPU: Hopper's wgmma target has sm_90's limits, not a parse error.
    hopper = for_arch("sm_90a")
    assert hopper.cc == (9, 0) and hopper.smem_per_block_optin == for_arch("sm_90").smem_per_block_optin
