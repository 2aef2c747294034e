"""Ladder step 9's host side, without a GPU: kernel parameters with raw by-value structs laid out as
the CUDA ABI does, the tensor-map rules that choose the fallback path, and the refusal below sm_90."""

import struct
from types import MethodType, SimpleNamespace

import pytest

from nnbench import workloads
from nnbench.errors import NnbenchError
from nnbench.runtime import tensormap
from nnbench.runtime.device import DeviceInfo
from nnbench.runtime.ladder_gemm import SIGNATURE
from nnbench.runtime.params import param_format, raw
from nnbench.runtime.tensormap import tiled_problem
from nnbench.workloads.gemm import session as gemm

STEP9 = workloads.get("gemm", "tf32x3_wgmma")


def _h100():
    """An H100's SM count and shared memory, with the device's own grid rule for grid-stride passes (split_b's)."""
    device = SimpleNamespace(sm_count=132, smem_per_block_optin=232448)
    device.stride_blocks = MethodType(DeviceInfo.stride_blocks, device)
    return device


def test_raw_params_go_where_the_kernel_reads_them():
    """gemm(M, N, K, alpha, A, B, beta, C, OperandMaps a, OperandMaps b, int paths, int* split_sync,
    float* split_work) on sm_90a, with the offsets its cubin declares (cuobjdump -elf: KPARAM_INFO): the
    64-byte-aligned structs of 4 maps start at 0x70 and 0x270, since sm_90's parameter bank begins at
    0x210, `paths` at 0x470 and the pointers at 0x478 and 0x480."""
    offsets = [0, 4, 8, 12, 16, 24, 32, 40, 0x70, 0x270, 0x470, 0x478, 0x480]
    fmt = param_format(SIGNATURE + raw(512, 64) * 2 + "iPP", offsets)
    args = (1, 2, 3, 1.0, 0xA, 0xB, 0.0, 0xC, b"a" * 512, b"b" * 512, 3, 0xD, 0xE)
    buf = struct.pack(fmt, *args)
    assert buf.index(b"a" * 512) == 0x70 and buf.index(b"b" * 512) == 0x270 and len(buf) == 0x488
    assert struct.unpack_from("iiPP", buf, 0x470)[::2] == (3, 0xD) and struct.unpack_from("P", buf, 0x480) == (0xE,)
    assert param_format("Pi{8@8}", [0, 8, 16]) == "Pi4x8s"
    assert param_format("iiifPPfP") == "iiifPPfP"


def test_bad_signature_is_one_clear_error():
    with pytest.raises(NnbenchError, match="cannot read"):
        param_format("ii{128}")
    with pytest.raises(NnbenchError, match="power of two"):
        param_format("i{128@48}")
    with pytest.raises(NnbenchError, match="need the kernel's parameter offsets"):
        param_format("i{128@64}")
    with pytest.raises(NnbenchError, match="cannot start at byte 2"):
        param_format("i{128@64}", [0, 2])
    with pytest.raises(NnbenchError, match="has 2 parameters; the kernel has 3"):
        param_format("i{128@64}", [0, 64, 192])


def test_tensor_map_rules_pick_the_fallback():
    box = (136, 32)
    assert tiled_problem(0x10000, (4096, 4096), (4096 * 4,), box) is None
    assert "multiple of 16" in tiled_problem(0x10000, (1234, 777), (1234 * 4,), box)  # K = 1234: B falls back
    assert "16-byte aligned" in tiled_problem(0x10004, (4096, 4096), (4096 * 4,), box)
    assert "swizzle span" in tiled_problem(0x10000, (4096, 4096), (4096 * 4,), (64, 128), 128)
    assert tiled_problem(0x10000, (4096, 4096), (4096 * 4,), (32, 128), 128) is None


def test_copy_path_names_the_fallback():
    assert gemm.copy_path([], []) == "TMA"
    assert gemm.copy_path(["A"], []) == "TMA, A by 4 phase maps (leading dim % 4 != 0)"
    assert gemm.copy_path(["A"], ["B"]) == "TMA, A by 4 phase maps (leading dim % 4 != 0), cp.async B"
    assert gemm.copy_path([], ["A", "B"]) == "cp.async A+B"


def _recorded_maps(monkeypatch):
    made = []
    monkeypatch.setattr(tensormap, "encode_tiled", lambda *a: made.append(a) or bytes(tensormap.MAP_BYTES))
    return made


@pytest.mark.parametrize("rows,cols", [(7, 101), (121, 4096), (501, 9), (1, 129), (6, 4), (1234, 777)])
def test_phase_maps_address_every_element_once(monkeypatch, rows, cols):
    """Phase map r's element (inner i, outer j) must be the operand's (row i - lead_r, column 4j + r), with
    lead_r = (r rows) % 4 as the kernel computes it (PATH_LD_*), every element covered once, and each map
    valid by the driver's rules (16-byte aligned start and stride). The kernel asks for boxes at inner
    coordinate m0, a multiple of 4 (an unaligned inner coordinate faults), and reads row m at m - m0 +
    lead_r."""
    made = _recorded_maps(monkeypatch)
    base = 0x7F0000000000
    maps, phased = gemm.operand_maps(base, rows, cols, (136, 32), 0)
    assert phased and len(maps) == gemm.PHASES * tensormap.MAP_BYTES and len(made) == gemm.PHASES
    seen = set()
    for r, (addr, dims, strides, box, swizzle) in enumerate(made):
        assert tensormap.tiled_problem(addr, dims, strides, box, swizzle) is None
        assert box == (136, 8)
        lead = r * (rows % 4) % 4  # the kernel's (r * PATH_LD_A(paths)) & 3
        for j in range(dims[1]):
            for i in range(lead, dims[0]):
                element = (addr + 4 * i + strides[0] * j - base) // 4
                assert element == (4 * j + r) * rows + (i - lead)
                seen.add(element)
        assert dims[0] - lead == rows
    assert seen == set(range(rows * cols))


def test_phase_maps_only_where_one_map_cannot_be_made(monkeypatch):
    made = _recorded_maps(monkeypatch)
    assert gemm.operand_maps(0x10000, 4096, 4096, (32, 128), 128)[1] is False and len(made) == 1
    assert gemm.operand_maps(0x10000, 4097, 3, (136, 32), 0) is None  # fewer columns than phases: cp.async
    assert gemm.operand_maps(0x10004, 4096, 64, (136, 32), 0) is None  # an unaligned operand: cp.async
    assert gemm.operand_maps(0x10000, 501, 4096, (32, 128), 128, phases=False) is None  # B: cp.async


def test_split_k_only_where_tiles_leave_sms_idle():
    assert gemm.split_k(1024, 128, 132) == 1  # 4096^3: the tiles fill the GPU
    assert gemm.split_k(4, 128, 132) == 32  # Net 8's 121 x 500 x 4096 weight gradient: 4 tiles
    assert gemm.split_k(16, 128, 132) == 8
    assert gemm.split_k(56, 39, 132) == 2  # 1000 x 777 x 1234
    assert gemm.split_k(32, 4, 132) == 2  # 7 x 4096 x 101: two k-blocks a slice
    assert gemm.split_k(32, 3, 132) == 1  # too little K to share
    assert gemm.split_k(12, 32, 132) == 11  # 257 x 511 x 1023: 3 k-blocks a slice, none empty
    for tiles, k_blocks in ((1, 128), (4, 16), (12, 32), (7, 100), (2, 5)):
        s = gemm.split_k(tiles, k_blocks, 132)
        per = -(-k_blocks // s)
        assert (s - 1) * per < k_blocks and s * tiles <= 132  # the kernel's KRange: no slice empty
    assert gemm.split_k(1024, 128, 132, asked=4) == 1  # asked, but the tiles alone fill the SMs
    assert gemm.split_k(32, 16, 132, asked=2) == 2 and gemm.split_k(32, 16, 132, asked=8) == 4  # 4 x 32 <= 132
    assert gemm.split_k(4, 3, 132, asked=8) == 3  # one k-block a slice
    assert gemm.split_k(4, 5, 132, asked=4) == 3  # 2 k-blocks a slice: a fourth slice would be empty


def _device(cc):
    return DeviceInfo("test GPU", cc, 108, 1410.0, 1215.0, 5120, 40 << 30, 40 << 20, smem_per_block_optin=232448)


def test_below_sm90_step9_is_a_skip_row_and_the_rest_still_plan():
    a100 = _device((8, 0))
    why = STEP9.arch_problem(a100)
    assert why and "sm_90a" in why and "sm_80" in why
    assert STEP9.arch_problem(_device((9, 0))) is None
    cases = gemm.plan([], {}, a100)  # every step: planning never refuses the run for step 9 ...
    assert {"tf32x3", "tf32x3_wgmma", "tf32_wgmma"} <= {c.variant.name for c in cases}
    assert STEP9.device_problems(STEP9.defaults(), a100)[0] == why  # ... a sweep makes it a SKIP row


def test_step9_needs_its_shared_memory():
    h100 = _device((9, 0))
    assert not STEP9.device_problems(STEP9.defaults(), h100)
    deep = dict(STEP9.defaults(), STAGES=6)  # 3xTF32 at 128 x 128: 6 stages need 302 KB
    assert "shared memory" in STEP9.device_problems(deep, h100)[0]
    assert STEP9.target("sm_80") == "sm_90a" and workloads.get("gemm", "tf32x3").target("sm_80") == "sm_80"


def test_step9_tile_rules():
    d = STEP9.defaults()
    assert d["ADAPT"] == 1 and d["BN"] == 128

    def tile(m, n, k):
        params, split, _ = gemm.step9_tile(gemm.Shape(m, n, k), d, 132)
        return params["BN"], split

    def rows(m, n, k):
        return gemm.step9_tile(gemm.Shape(m, n, k), d, 132)[0]["BM"]

    assert tile(4096, 4096, 4096) == (128, True)
    assert tile(101, 7, 4096) == (64, True)  # N <= 64
    assert tile(100, 4096, 501) == (64, True)  # B by cp.async, 32 tiles of 128 columns
    assert tile(1000, 777, 1234) == (64, True)
    assert tile(500, 4096, 501) == (128, True)  # 128 tiles: the grid is full
    assert tile(7, 4096, 101) == (64, False)  # B by cp.async and M <= 64: one slice, 64 columns
    assert (rows(7, 4096, 101), rows(64, 4096, 4096), rows(65, 4096, 4096), rows(100, 4096, 501)) == (64, 64, 128, 128)
    assert gemm.step9_tile(gemm.Shape(7, 9000, 13), dict(d, BM=64), 132)[2] == "B by cp.async, few tiles"
    assert tile(121, 500, 4096) == (128, True)
    assert gemm.step9_tile(gemm.Shape(101, 7, 4096), dict(d, BN=64), 132)[0]["BN"] == 64  # a given BN = 64 stays
    assert gemm.step9_tile(gemm.Shape(7, 4096, 101), dict(d, BN=64), 132)[1] is False  # M <= 64, B by cp.async


def test_wide_plan_takes_small_m_wide_n_and_fits_shared_memory():
    """The transposed path (09_wide.cuh) for Net 8's two narrow forward GEMMs at batch 4096, as the H100 sees them
    (132 SMs, 227 KiB of shared memory a block): 100x4096x501 gets wgmma n104, two 64-column tiles a block and 4
    slices of 4 k-blocks (128 blocks, all resident); 7x4096x101 n8, one tile a block, no split. The main kernel
    keeps M > 128, N < 2048, ADAPT=0, clusters, the persistent loop, and an A^T slice that cannot fit."""
    d = STEP9.defaults()
    sms, smem = 132, 232448
    p = gemm.wide_plan(gemm.Shape(100, 4096, 501), d, sms, smem)
    assert (p.n, p.groups, p.splits, p.per) == (104, 2, 4, 4)
    assert 32 * p.splits <= sms and p.smem() <= smem
    assert p.smem() == 4 * 104 * 32 * 4 * 2 + 2 * 4 * 64 * 36 * 4 + 1024
    p = gemm.wide_plan(gemm.Shape(7, 4096, 101), d, sms, smem)
    assert (p.n, p.groups, p.splits, p.per) == (8, 1, 1, 4)
    p = gemm.wide_plan(gemm.Shape(100, 4096, 7), d, sms, smem)  # one k-block: one tile a block (measured faster)
    assert (p.n, p.groups, p.splits, p.per) == (104, 1, 1, 1)
    assert gemm.wide_plan(gemm.Shape(7, 4096, 101), dict(d, PRECISION=1), sms, smem).smem() == \
        4 * 8 * 32 * 4 + 4 * 64 * 36 * 4 + 1024
    assert gemm.wide_plan(gemm.Shape(7, 4096, 101), dict(d, SPLIT_K=2), sms, smem).splits == 2
    # A slice count asked for whose A^T slice cannot fit (100x4096x501 in 2: 8 k-blocks of n104): the main kernel.
    assert gemm.wide_plan(gemm.Shape(100, 4096, 501), dict(d, SPLIT_K=2), sms, smem) is None
    for shape, params in [((129, 4096, 64), d), ((100, 2047, 501), d), ((100, 4096, 501), dict(d, ADAPT=0)),
                          ((100, 4096, 501), dict(d, CLUSTER_M=2)), ((100, 4096, 501), dict(d, PERSISTENT=1)),
                          ((128, 4096, 4096), d)]:  # 64 tiles, 2 slices of 64 k-blocks: 4 MiB of A^T a block
        assert gemm.wide_plan(gemm.Shape(*shape), params, sms, smem) is None, shape
    # More slices where one slice of A^T would not fit: 128 x 8192 x 1024, 64 tiles, 2 slices of 16 k-blocks.
    p = gemm.wide_plan(gemm.Shape(128, 8192, 1024), d, sms, smem)
    assert p is None or (p.smem() <= smem and 64 * p.splits <= sms)


def test_the_launched_kernel_names_the_transposed_path():
    """ncu profiles the kernel a launch runs: `gemm_wide` where wide_plan takes the shape, else `gemm`."""
    dev = DeviceInfo("H100", (9, 0), 132, 1980.0, 2619.0, 5120, 80 << 30, 50 << 20)
    assert gemm.launched_kernel(STEP9, STEP9.defaults(), gemm.Shape(7, 4096, 101), dev) == "gemm_wide"
    assert gemm.launched_kernel(STEP9, STEP9.defaults(), gemm.Shape(500, 4096, 501), dev) == "gemm"
    assert gemm.launched_kernel(STEP9, dict(STEP9.defaults(), ADAPT=0), gemm.Shape(7, 4096, 101), dev) == "gemm"


def test_the_transposed_launch_without_a_gpu(monkeypatch):
    """gemm_launch on 100x4096x501 with a stand-in backend: the transposed module (WIDE_N=104, WIDE_G=2), the
    kernel `gemm_wide`, grid (32, 1, 4) of (256, 1, 1) threads (a 3-tuple: PyCUDA's prepared call takes no
    other), per = 4 and zeroed split-K counters among the arguments, and `ran` naming what runs (for the
    record's resource columns)."""
    built, launched, uploaded = [], [], []
    monkeypatch.setattr(gemm, "_tile_module", lambda backend, v, params: built.append(params) or "module")

    class Backend:
        device = _h100()

        def load(self, module, name):
            return SimpleNamespace(name=name, module=module)

        def upload(self, host):
            uploaded.append(host)
            return host

        def alloc(self, nbytes):
            return nbytes

        def ptr(self, buf):
            return 0

        def bind(self, kernel, grid, block, args, signature=None, smem=0):
            launched.append((kernel.name, grid, block, args, signature, smem))
            return lambda: None

    launch_for, path = gemm.gemm_launch(Backend(), None, STEP9, STEP9.defaults(), gemm.Shape(100, 4096, 501), 1, 2, 3)
    launch_for(1.0, 0.0)()
    plan = gemm.wide_plan(gemm.Shape(100, 4096, 501), STEP9.defaults(), 132, 232448)
    assert built[0]["WIDE_N"] == 104 and built[0]["WIDE_G"] == 2
    name, grid, block, args, signature, smem = launched[0]
    assert (name, grid, block, signature, smem) == ("gemm_wide", (32, 1, 4), (256, 1, 1), "iiifPPfPiPP", plan.smem())
    assert args[8] == 4 and uploaded[0].size == 2 * 32 and not uploaded[0].any()  # per; 2 counters a tile, zeroed
    assert launch_for.ran[1:] == (256, plan.smem()) and launch_for.ran[0].name == "gemm_wide"
    assert path.endswith("wgmma n104, 2 x 64 columns a block, cp.async B, split-K 4")


class _Kernel:
    """A stand-in loaded kernel: `sibling` gives another kernel of its module, as the CUDA backend's does."""

    def __init__(self, name):
        self.name = name

    def sibling(self, name):
        return _Kernel(name)


class _RecordingBackend:
    """gemm_launch's backend without a GPU: buffers are addresses, each bound launch appends its kernel's name
    to `ran` when called."""
    from types import SimpleNamespace
    device = _h100()

    def __init__(self):
        self.allocs, self.bound, self.ran = [], [], []

    def load(self, module, name):
        return _Kernel(name)

    def upload(self, host):
        return self.alloc(host.nbytes)

    def alloc(self, nbytes):
        self.allocs.append(nbytes)
        return 0x7F0000000000 + (len(self.allocs) << 32)

    def ptr(self, buf):
        return buf

    def bind(self, kernel, grid, block, args, signature=None, smem=0):
        self.bound.append((kernel.name, grid, block, args, signature))
        return lambda: self.ran.append(kernel.name)


@pytest.mark.parametrize("name,copies", [("tf32x3_wgmma", 2), ("tf32_wgmma", 1)])
@pytest.mark.parametrize("extra", [{}, {"CLUSTER_M": 2, "PERSISTENT": 1}, {"ADAPT": 0}])
def test_split_b_runs_first_every_launch_and_b_comes_from_its_workspace(monkeypatch, name, copies, extra):
    """SPLIT_B=1 at 1000x777x1234 (K % 4 != 0, where B itself cannot be mapped): each call of the launch runs
    `split_b` on the current B, then `gemm`; the workspace holds `copies` K-major copies with a leading
    dimension of K rounded up to 4, B's maps (m[0] big, m[1] small) are the workspace's with the kernel's box,
    and B comes by the copy engine (PATH_TMA_B), not by cp.async."""
    made = _recorded_maps(monkeypatch)
    monkeypatch.setattr(gemm, "_tile_module", lambda backend, v, params: "module")
    v = workloads.get("gemm", name)
    params = dict(v.defaults(), SPLIT_B=1, **extra)
    assert not v.problems(params)
    be, shape, pb = _RecordingBackend(), gemm.Shape(1000, 777, 1234), 0x7E0000000000
    launch_for, path = gemm.gemm_launch(be, _Kernel("gemm"), v, params, shape, 0x7D0000000000, pb, 0x7C0000000000)
    ld = 1236
    work = be.allocs.index(4 * copies * ld * shape.N)  # the workspace, allocated first
    work_ptr = 0x7F0000000000 + ((work + 1) << 32)
    split, = [b for b in be.bound if b[0] == "split_b"]
    assert split[1:] == ((min(-(-ld // 4 * shape.N // 256), 8 * 132), 1, 1), (256, 1, 1),
                         (1234, 777, ld, pb, work_ptr), "iiiPP")
    box = (32, 128 // params["CLUSTER_M"])
    b_maps = [m for m in made if m[0] >= work_ptr]
    assert b_maps == [(work_ptr + c * 4 * ld * shape.N, (ld, shape.N), (4 * ld,), box, 128) for c in range(copies)]
    assert not [m for m in made if m[0] == pb]  # B itself is never mapped
    timed = launch_for(1.0, 0.0)  # as measure calls it: one callable, launched again and again
    timed()
    timed()
    launch_for(0.75, -1.5)()
    assert be.ran == ["split_b", "gemm"] * 3
    gemm_args = [b for b in be.bound if b[0] == "gemm"][-1][3]
    assert gemm_args[10] & 2 and "cp.async B" not in path and path.count("B split first (split_b)") == 1, path
    assert len(gemm_args[9]) == gemm.PHASES * tensormap.MAP_BYTES


def test_split_b_zero_keeps_b_as_it_is(monkeypatch):
    """SPLIT_B=0: one launch, B mapped where it lies (or by cp.async where K % 4 != 0), no workspace for it."""
    _recorded_maps(monkeypatch)
    monkeypatch.setattr(gemm, "_tile_module", lambda backend, v, params: "module")
    be = _RecordingBackend()
    launch_for, path = gemm.gemm_launch(be, _Kernel("gemm"), STEP9, STEP9.defaults(), gemm.Shape(1000, 777, 1234),
                                        1 << 20, 2 << 20, 3 << 20)
    launch_for(1.0, 0.0)()
    assert be.ran == ["gemm"] and path.endswith("TMA, cp.async B") and "split_b" not in path


def test_split_b_takes_the_copy_engine_rules_not_cp_async_ones():
    """step9_tile's narrow-tile and no-split rules are for B by cp.async (K % 4 != 0): with SPLIT_B=1 B comes by
    the copy engine from its workspace, so they do not apply."""
    params = STEP9.defaults()
    assert gemm.step9_tile(gemm.Shape(1000, 777, 1234), params, 132)[0]["BN"] == 64
    assert gemm.step9_tile(gemm.Shape(1000, 777, 1234), dict(params, SPLIT_B=1), 132)[0]["BN"] == 128
    assert gemm.step9_tile(gemm.Shape(7, 4096, 101), params, 132)[1] is False
    assert gemm.step9_tile(gemm.Shape(7, 4096, 101), dict(params, SPLIT_B=1), 132)[1] is True
