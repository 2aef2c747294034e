"""The lab's sweep-overhead study scripts (lab/scripts/sweep_overhead.py, sweep_pairs.py): their pair order and
their sample-matched ratio (CPU: the arithmetic only)."""

from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_the_mirrored_order_gives_each_kind_the_places_the_other_had():
    """lab/scripts/sweep_overhead.py --lead plain: the pairs run p g, g p, ... so that an effect of the
    place in the series (after the cold run, say) and an effect of `--gpus 1` point different ways."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweep_overhead", SCRIPTS / "sweep_overhead.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    usual, mirrored = script.order(3), script.order(3, "plain")
    assert usual[0] == mirrored[0] == ("plain_cold", "plain")
    assert [k for _, k in usual[1:]] == ["gpus1", "plain", "plain", "gpus1", "gpus1", "plain"]
    assert [k for _, k in mirrored[1:]] == ["plain", "gpus1", "gpus1", "plain", "plain", "gpus1"]
    assert sorted(n for n, _ in usual) == sorted(n for n, _ in mirrored)  # the same runs, named alike


def _script(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sample_matched_ratio_takes_out_only_the_extra_samples():
    """lab/scripts/sweep_pairs.py: a `--gpus 1` run that drew 90 more samples of a 5 ms case (0.45 s more,
    reps 1) and spent 0.1 s more outside kernels reads +0.1 s on the matched run phase, not +0.55 s;
    the order-statistic interval of 6 pairs is min..max at 96.9%."""
    pairs = _script("sweep_pairs")
    case, other = ("v", "a", "s"), ("v", "b", "s")
    p_rows = {case: {"samples": [5.0] * 10, "reps": 1, "median_ms": 5.0}, other: {"samples": [2.0] * 20, "reps": 2,
                                                                                    "median_ms": 2.0}}
    g_rows = {case: {"samples": [5.0] * 100, "reps": 1, "median_ms": 5.0}, other: {"samples": [2.0] * 10, "reps": 2,
                                                                                     "median_ms": 2.0}}
    p = {"run_s": 20.0, "kernel_s": 18.0, "first_record_s": 2.0}
    g = {"run_s": 20.0 + 0.45 - 0.04 + 0.1, "kernel_s": 18.0 + 0.45 - 0.04, "first_record_s": 2.0}
    fig = pairs.pair(g, p, g_rows, p_rows)
    assert abs(fig["matched"] - 0.1 / (20.0 - 0.04)) < 1e-9, fig
    assert abs(fig["outside_s"] - 0.1) < 1e-9 and fig["samples"] == 80 and fig["kernels"] == 0.0
    lo, hi, cover = pairs.sign_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0])
    assert (lo, hi) == (1.0, 6.0) and abs(cover - (1 - 2 / 64)) < 1e-12
