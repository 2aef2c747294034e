"""The autotuner (nnbench/runtime/autotune.py) on a fake clock: the cache round trip, another driver's
entry ignored, a tie re-timed in pairs, and the ways a run keeps its fixed tiles; the candidate sets
that conv and GEMM step 9 hand it."""

from __future__ import annotations

import json

import pytest

from nnbench import registry
from nnbench.runtime import autotune
from nnbench.runtime.autotune import CACHED, PAIRED, TIMED, Identity, Tuner
from nnbench.runtime.device import DeviceInfo
from nnbench.workloads.conv import launch as conv_launch
from nnbench.workloads.conv import session as conv_session
from nnbench.workloads.conv.problem import ConvShape
from nnbench.workloads.conv.variants import VARIANTS as CONV_VARIANTS
from nnbench.workloads.gemm import session as gemm_session
from nnbench.workloads.gemm.problem import Shape
from nnbench.workloads.gemm.variants import VARIANTS as GEMM_VARIANTS

H100 = DeviceInfo(name="NVIDIA H100 80GB HBM3", cc=(9, 0), sm_count=132, sm_clock_mhz=1980, mem_clock_mhz=2619,
                  bus_width_bits=5120, mem_bytes=80 << 30, l2_bytes=50 << 20)
CANDIDATES = [{"BN": 64, "SPLIT": 1}, {"BN": 128, "SPLIT": 1}, {"BN": 128, "SPLIT": 2}]


class FakeTimer:
    """Each launch is its candidate's label; `medians` gives what one `measure` reads for it, `paired` what
    each of a pair's alternating launches reads."""

    def __init__(self, medians: dict[str, float], noise: float = 0.002, paired: dict[str, float] | None = None):
        self.medians, self.noise, self.paired = medians, noise, paired or medians
        self.sampled: list[str] = []
        self.once_calls: list[str] = []

    def sample(self, launch):
        self.sampled.append(launch)
        return self.medians[launch], self.noise, 4

    def once(self, launch, reps):
        self.once_calls.append(launch)
        return self.paired[launch]


def build(c: dict) -> str:
    return autotune.label(c)


def tuner(tmp_path, timer, driver="550.54.15") -> Tuner:
    return Tuner(Identity("NVIDIA H100 80GB HBM3 GPU-0b1c", driver), timer, path=tmp_path / "autotune.json")


def times(fast: str, **others) -> dict[str, float]:
    out = {build(c): 1.0 for c in CANDIDATES}
    out[fast] = 0.5
    out.update(others)
    return out


def test_the_fastest_is_chosen_and_a_second_run_takes_it_from_the_cache_without_timing(tmp_path):
    first = FakeTimer(times("BN=128 SPLIT=2"))
    choice = tuner(tmp_path, first).choose("conv/implicit-wgmma", "abc", "N32 C64", CANDIDATES, build)
    assert choice.params == {"BN": 128, "SPLIT": 2} and choice.how == TIMED and len(first.sampled) == 3
    assert choice.marker() == "timed: BN=128 SPLIT=2 (3 of 3)"
    again = FakeTimer(times("BN=64 SPLIT=1"))  # would pick another tile if it timed anything
    t = tuner(tmp_path, again)
    hit = t.choose("conv/implicit-wgmma", "abc", "N32 C64", CANDIDATES, build)
    assert hit.params == choice.params and hit.how == CACHED and again.sampled == [] and t.timings == 0
    # another shape, kernel source or candidate set is another entry: timed
    for kernel, source, shape, cands in (("conv/implicit-wgmma", "abc", "N32 C128", CANDIDATES),
                                         ("conv/implicit-wgmma", "abd", "N32 C64", CANDIDATES),
                                         ("conv/implicit-wgmma", "abc", "N32 C64", CANDIDATES[:2])):
        before = len(again.sampled)
        assert tuner(tmp_path, again).choose(kernel, source, shape, cands, build).how != CACHED
        assert len(again.sampled) > before


def test_another_drivers_entry_is_ignored_and_replaced(tmp_path):
    planted = tuner(tmp_path, FakeTimer(times("BN=128 SPLIT=2")), driver="535.104.05")
    planted.choose("gemm/tf32x3_wgmma", "abc", "4096×4096×4096", CANDIDATES, build)
    entry = next(iter(json.loads((tmp_path / "autotune.json").read_text())["entries"].values()))
    assert entry["driver"] == "535.104.05" and entry["params"] == {"BN": 128, "SPLIT": 2}
    now = FakeTimer(times("BN=64 SPLIT=1"))
    choice = tuner(tmp_path, now).choose("gemm/tf32x3_wgmma", "abc", "4096×4096×4096", CANDIDATES, build)
    assert choice.how == TIMED and len(now.sampled) == 3 and choice.params == {"BN": 64, "SPLIT": 1}
    entries = json.loads((tmp_path / "autotune.json").read_text())["entries"]
    assert [e["driver"] for e in entries.values()] == ["550.54.15"]


def test_a_damaged_cache_is_an_empty_one(tmp_path):
    (tmp_path / "autotune.json").write_text("{not json")
    choice = tuner(tmp_path, FakeTimer(times("BN=128 SPLIT=1"))).choose("k", "s", "x", CANDIDATES, build)
    assert choice.how == TIMED and json.loads((tmp_path / "autotune.json").read_text())["format"] == autotune.FORMAT


def test_a_tie_within_noise_is_decided_by_paired_timing_not_by_one_draw(tmp_path):
    # One draw puts BN=128 SPLIT=1 ahead by 0.3% (within the 2% noise); the alternating pairs find BN=64 3% faster.
    medians = {"BN=64 SPLIT=1": 1.000, "BN=128 SPLIT=1": 0.997, "BN=128 SPLIT=2": 1.5}
    timer = FakeTimer(medians, noise=0.02, paired={"BN=64 SPLIT=1": 0.97, "BN=128 SPLIT=1": 1.0, "BN=128 SPLIT=2": 9})
    choice = tuner(tmp_path, timer).choose("k", "s", "x", CANDIDATES, build)
    assert choice.how == PAIRED and choice.params == {"BN": 64, "SPLIT": 1}
    assert len(timer.once_calls) == 2 * autotune.PAIRS and "BN=128 SPLIT=2" not in timer.once_calls
    assert timer.once_calls[:4] == ["BN=128 SPLIT=1", "BN=64 SPLIT=1", "BN=64 SPLIT=1", "BN=128 SPLIT=1"]


def test_a_tie_that_pairs_cannot_break_keeps_the_earlier_candidate(tmp_path):
    medians = {"BN=64 SPLIT=1": 1.000, "BN=128 SPLIT=1": 0.999, "BN=128 SPLIT=2": 1.5}
    timer = FakeTimer(medians, noise=0.02, paired={"BN=64 SPLIT=1": 1.0, "BN=128 SPLIT=1": 0.999, "BN=128 SPLIT=2": 9})
    assert tuner(tmp_path, timer).choose("k", "s", "x", CANDIDATES, build).params == CANDIDATES[0]


def test_a_clear_winner_is_not_retimed(tmp_path):
    timer = FakeTimer(times("BN=128 SPLIT=1"), noise=0.02)
    assert tuner(tmp_path, timer).choose("k", "s", "x", CANDIDATES, build).how == TIMED and timer.once_calls == []


def test_a_candidate_that_cannot_run_is_passed_over(tmp_path):
    from nnbench.errors import NnbenchError

    def picky(c):
        if c["BN"] == 128 and c["SPLIT"] == 2:
            raise NnbenchError("too much shared memory")
        return build(c)
    choice = tuner(tmp_path, FakeTimer(times("BN=128 SPLIT=2"))).choose("k", "s", "x", CANDIDATES, picky)
    assert choice.params != {"BN": 128, "SPLIT": 2} and choice.times_ms[2] is None


# -- when a run keeps its fixed tiles ---------------------------------------------------------------
def test_no_autotune_and_a_cpu_backend_have_no_tuner():
    from nnbench.cli import app

    class Gpu:
        name, runs_kernels = "cuda", True
        device = H100

        def environment(self):
            return {"gpu_uuid": "GPU-1", "driver": "550.54.15"}
    assert app.tuner(Gpu(), no_autotune=True) is None
    assert isinstance(app.tuner(Gpu(), no_autotune=False), Tuner)
    assert Tuner.for_backend(type("Cpu", (), {"name": "cpu", "runs_kernels": False})()) is None


def test_an_explicit_parameter_fixes_the_variants_that_take_it(tmp_path):
    step9 = registry.find(GEMM_VARIANTS, "gemm", "tf32x3_wgmma")
    t = Tuner(Identity("d", "1"), FakeTimer({}), path=tmp_path / "a.json", fixed={"BN"})
    assert not t.takes(step9)
    assert Tuner(Identity("d", "1"), FakeTimer({}), path=tmp_path / "a.json", fixed={"TS"}).takes(step9)


class Refuses(Tuner):
    """A tuner that must not be asked: its case keeps the fixed tiles."""

    def choose(self, *a, **k):
        raise AssertionError("tuned a case that should keep its fixed tiles")


class Picks(Tuner):
    def choose(self, kernel, source_hash, shape, candidates, build):
        self.asked = candidates
        return autotune.Choice(dict(candidates[0]), 0, CACHED, len(candidates))


def bare_conv_session():
    s = conv_session.ConvSession.__new__(conv_session.ConvSession)
    s.backend = type("Gpu", (), {"device": H100, "arch": "sm_90"})()
    return s


@pytest.mark.parametrize("fixed", [True, False])
def test_the_conv_session_tunes_only_where_allowed(tmp_path, fixed):
    v = registry.find(CONV_VARIANTS, "conv", "implicit-wgmma")
    params = v.defaults()
    layer = ConvShape(32, 128, 28, 28, 128, 3, 1, 1)
    made = []

    def make(p, module, splits, *buffers):
        made.append((p, splits))
        return "launch", "TMA"
    session = bare_conv_session()
    session.tuner = Refuses(Identity("d", "1"), FakeTimer({}), tmp_path / "a.json", fixed={"BN"}) if fixed else \
        Picks(Identity("d", "1"), FakeTimer({}), tmp_path / "a.json")
    rec = {"params": "as given"}
    launch, path, build = session._tuned(rec, v, params, "module", layer, make, conv_launch.forward_candidates)
    assert (launch, path) == ("launch", "TMA")
    chosen = made[-1]
    assert build("fresh X", "fresh Y") == "launch" and made[-1] == chosen  # the fresh-buffers launch: the same tile
    del made[-1]
    if fixed:
        assert made == [(params, {})] and rec == {"params": "as given"}
    else:
        assert made[-1] == (params, {"SPLIT": session.tuner.asked[0]["SPLIT"]})
        assert rec["tuned"] == f"cache: BN=64 SPLIT={session.tuner.asked[0]['SPLIT']} (1 of {len(session.tuner.asked)})"
        assert rec["params"] == f"{autotune.label(params)} · tuned (cache)"


# -- the candidates -------------------------------------------------------------------------------
def test_conv_candidates_lead_with_the_fixed_rule_and_keep_slices_long_enough():
    v = registry.find(CONV_VARIANTS, "conv", "implicit-wgmma")
    p = v.defaults()
    s = ConvShape(32, 128, 28, 28, 128, 3, 1, 1)
    cands = conv_launch.forward_candidates(v, p, s, 132)
    tiles = -(-s.N * s.Ho * s.Wo // p["BM"]) * -(-s.K // p["BN"])
    k_blocks = -(-s.C * 9 // p["BK"])
    assert cands[0] == {"BN": p["BN"], "SPLIT": conv_launch.forward_slices(tiles, k_blocks, 132)}
    assert {c["BN"] for c in cands} == {64, 128} and len(cands) == len({tuple(c.items()) for c in cands})
    assert all(k_blocks // c["SPLIT"] >= conv_launch.TUNE_MIN_K_BLOCKS for c in cands if c["SPLIT"] > 1)
    small = ConvShape(1, 4, 8, 8, 8, 3, 1, 1)  # 36 taps: one k-block, never split
    assert {c["SPLIT"] for c in conv_launch.forward_candidates(v, p, small, 132)} == {1}
    back = registry.find(CONV_VARIANTS, "conv", "implicit-wgmma-backward")
    bc = conv_launch.backward_candidates(back, back.defaults(), ConvShape(32, 64, 56, 56, 128, 3, 2, 1), 132)
    assert {c["DATA_SPLIT"] for c in bc} == {1}  # a strided layer's phases fill gridDim.z


def test_step9_candidates_drop_what_launches_the_same():
    v = registry.find(GEMM_VARIANTS, "gemm", "tf32x3_wgmma")
    p = v.defaults()
    big = gemm_session.step9_candidates(v, p, Shape(4096, 4096, 4096), H100)
    # 1024 tiles: no split is ever taken, and the host's rules keep BN as given
    assert big == [{"ADAPT": 1, "BN": 128, "SPLIT_K": 0}, {"ADAPT": 1, "BN": 64, "SPLIT_K": 0}]
    # K % 4 != 0 and 56 tiles: the rules take BN = 64 whatever is asked; ADAPT=0 tries BN = 128 as well
    shape = Shape(1000, 777, 1234)
    small = gemm_session.step9_candidates(v, p, shape, H100)
    assert small[0] == {"ADAPT": 1, "BN": 128, "SPLIT_K": 0} and {"ADAPT": 0, "BN": 128, "SPLIT_K": 0} in small
    plans = [gemm_session.launch_plan(v, dict(p, **c), shape, 132) for c in small]
    launched = {(tuple(sorted((k, x) for k, x in t.items() if k not in gemm_session.HOST_SIDE)), g, n)
                for t, _, g, n in plans}
    assert len(launched) == len(small) > 2
    wide = gemm_session.step9_candidates(v, p, Shape(100, 4096, 501), H100)  # the transposed path, and not
    assert wide[0]["ADAPT"] == 1 and any(c["ADAPT"] == 0 for c in wide)
