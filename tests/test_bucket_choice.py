"""nnbench/runtime/buckets.py (the choice of bucket sizes): the allreduce curve's fit, the exposed-time
model and the bucket choice, on synthetic curves and backward passes (no GPU); and the curve's cache."""

import itertools
import json
import math

import pytest

from nnbench.runtime import buckets
from nnbench.runtime.buckets import Backward, Curve
from nnbench.runtime.exchange import plan_buckets

MB = (1 << 20) // 4  # floats


def test_fit_recovers_latency_and_bandwidth():
    truth = Curve(20.0, 100.0)
    sizes = buckets.ladder(4 * MB)
    got = buckets.fit(sizes, [truth.us(n) for n in sizes])
    assert got.latency_us == pytest.approx(20.0) and got.gb_s == pytest.approx(100.0)


def test_fit_of_a_flat_curve_is_all_latency_and_never_negative():
    assert buckets.fit([1, 2, 4], [30.0, 29.0, 28.0]) == Curve(28.0, math.inf)
    got = buckets.fit([1000, 2000], [0.5, 3.0])  # the line through them would start below zero
    assert got.latency_us == 0.0 and got.gb_s > 0


def test_ladder_doubles_up_to_the_whole_gradient():
    assert buckets.ladder(3 * buckets.LADDER_FIRST) == [buckets.LADDER_FIRST, 2 * buckets.LADDER_FIRST,
                                                         3 * buckets.LADDER_FIRST]


def even_backward(layers: int, mb: float, layer_us: float, side_us: float = 0.0) -> Backward:
    """Layers of `mb` each, one gradient every `layer_us` (the last layer first)."""
    ready = [layer_us * (layers - l) for l in range(layers)]
    return Backward([int(mb * MB)] * layers, ready, [side_us] * layers, ready[0])


def test_exposed_of_one_allreduce_is_the_whole_call_after_the_backward():
    bw = even_backward(4, 1.0, 100.0, side_us=2.0)
    curve = Curve(10.0, 100.0)
    assert buckets.exposed_us(bw, [[3, 2, 1, 0]], curve) == pytest.approx(curve.us(4 * MB) + 8.0)


def test_buckets_hide_behind_a_long_backward_when_latency_is_cheap():
    bw = even_backward(8, 1.0, 200.0)
    choice = buckets.choose(bw, Curve(5.0, 50.0))  # 1 MB: 26 us, well inside a layer's 200 us
    assert choice.cap > 0 and choice.buckets > 1
    assert choice.exposed_us < choice.one_us
    assert "side stream" in choice.label() and "5.0 us" in choice.label()


def test_latency_bound_calls_stay_one_allreduce():
    bw = even_backward(8, 1.0, 20.0)
    choice = buckets.choose(bw, Curve(150.0, 1000.0))  # each call costs far more than the backward leaves
    assert choice.cap == 0 and choice.buckets == 1
    assert choice.label().startswith("one allreduce")


def test_no_overlap_window_means_one_allreduce():
    sizes = [MB] * 6
    bw = Backward(sizes, [100.0] * 6, [0.0] * 6, 100.0)  # every gradient ready at the end
    assert buckets.choose(bw, Curve(5.0, 50.0)).cap == 0


def test_the_choice_is_the_least_cost_of_every_cap():
    bw = Backward([3 * MB, MB, 2 * MB, MB // 2, MB], [900.0, 700.0, 420.0, 300.0, 120.0], [4.0] * 5, 900.0)
    curve = Curve(12.0, 40.0)
    choice = buckets.choose(bw, curve)

    def cost(cap):
        plan = plan_buckets(bw.sizes, cap)
        return buckets.exposed_us(bw, plan, curve) + curve.latency_us * (len(plan) - 1), len(plan)

    caps = [0] + [sum(bw.sizes[i:j]) for i, j in itertools.combinations(range(6), 2)] + [MB // 4, 10 * MB]
    assert cost(choice.cap) == min(cost(c) for c in caps)


def test_more_buckets_must_pay_for_their_latency():
    # two buckets hide 10 us more than one allreduce, but the second call's latency is 30 us
    sizes = [MB, MB]
    curve = Curve(30.0, 1e9)
    bw = Backward(sizes, [100.0, 60.0], [0.0, 0.0], 100.0)
    assert buckets.exposed_us(bw, [[1], [0]], curve) < buckets.exposed_us(bw, [[1, 0]], curve)
    assert buckets.choose(bw, curve).cap == 0


def test_curve_cache_round_trip_and_its_misses(tmp_path):
    path = tmp_path / buckets.CACHE_NAME
    key = buckets.cache_key("H100 GPU-x", 2, "nccl")
    curve = Curve(21.0, 80.0)
    buckets.store_curve(path, key, "550.1", "H100 GPU-x", 2, "nccl", [10, 20], [21.5, 22.0], curve)
    assert buckets.cached_curve(path, key, "550.1", 20) == curve
    assert buckets.cached_curve(path, key, "560.0", 20) is None  # another driver
    assert buckets.cached_curve(path, key, "550.1", 40) is None  # the ladder stopped short of this gradient
    assert buckets.cached_curve(path, buckets.cache_key("H100 GPU-x", 4, "nccl"), "550.1", 20) is None
    path.write_text("{damaged", encoding="utf-8")
    assert buckets.cached_curve(path, key, "550.1", 20) is None
    buckets.store_curve(path, key, "550.1", "H100 GPU-x", 2, "nccl", [10, 20], [21.5, 22.0], curve)
    assert json.loads(path.read_text())["format"] == buckets.FORMAT


def test_buckets_on_the_side_stream_run_one_after_another():
    curve = Curve(10.0, 50.0)
    bw = Backward([MB, MB], [100.0, 100.0], [1.0, 1.0], 100.0)  # both ready as the backward ends
    assert buckets.exposed_us(bw, [[1], [0]], curve) == pytest.approx(2 * (curve.us(MB) + 1.0))


def test_backward_timeline_of_a_recorded_step(monkeypatch):
    """A GPU step's launches (tests/test_buckets.py's recording backend), each 'timed' by its kernel: the
    weight gradients set the ready times from the last layer down, the backward data GEMMs advance the
    clock too, and the slice sums and updates are side work of their own layers."""
    from nnbench import measure, nets
    from nnbench.workloads.train import batched

    from .test_buckets import fake_net
    us = {"output_delta_batch": 1.0, "momentum_update": 3.0, "sum_slices": 5.0}
    for role, name in batched.GEMM_KERNELS.items():
        us[name] = {"forward": 1000.0, "backward-data": 20.0, "weight-gradient": 40.0}[role]

    def timed(be, run, settings):
        be.log.clear()
        run()
        return measure.summarize([us.get(be.log[-1][0], 0.0) * 1e-3])

    monkeypatch.setattr(batched.measure, "measure", timed)
    net, be = fake_net(nets.get(2).layers, 2048, exchange=True)  # 4 weight layers, each split-K: a slice sum each
    bw = batched.backward_timeline(net)
    L = net.L
    assert bw.sizes == [int(net.flat_off[l + 1] - net.flat_off[l]) for l in range(L)]
    # output deltas (1), then per layer from the top: backward data (not for the first layer), weight gradient
    want, clock = [0.0] * L, 1.0
    for l in range(L - 1, -1, -1):
        clock += (20.0 if l > 0 else 0.0) + 40.0
        want[l] = clock
    assert bw.ready_us == pytest.approx(want) and bw.end_us == pytest.approx(want[0])
    assert bw.side_us == pytest.approx([3.0 + 5.0] * L)


@pytest.mark.gpu
def test_a_one_rank_world_on_a_gpu_chooses_its_buckets_and_times_hot(cuda_backend, tmp_path, monkeypatch):
    """Without --bucket-mb the GPU version's buckets come from the measured curve (stored in the cache) and its
    own backward pass; the row says so, passes the float64 check, and its step (and the step without the
    allreduce) is timed hot, queued behind the blocking kernel as the one-GPU step is."""
    from nnbench import measure, nets
    from nnbench.runtime import exchange
    from nnbench.workloads.train import batched, mlp

    from .test_buckets import OneRankComm
    curves = tmp_path / buckets.CACHE_NAME
    monkeypatch.setattr(buckets.paths, "cache_dir", lambda: tmp_path)
    w = exchange.World(OneRankComm(), 0, 1, 0)
    chosen = mlp.plan(["batched"], "cuda", batched.versions())
    rec = next(batched.run(cuda_backend, chosen, nets.get(2).layers, mlp.Hyper(rate=1.0, momentum=0.5), 256,
                           epochs=1, train_samples=1024, test_per_letter=1, world=w))
    assert rec["status"] == "PASS", rec
    assert "chosen from the allreduce curve" in rec["params"], rec["params"]
    assert rec["timing"] in (measure.HOT_BATCHED, measure.HOT_SINGLE), rec["timing"]
    assert rec["compute_us"] > 0 and rec["us_per_step"] > 0
    entry = next(iter(json.loads(curves.read_text())["entries"].values()))
    assert entry["ranks"] == 1 and entry["max_floats"] >= batched.flat_size(nets.get(2).layers)
