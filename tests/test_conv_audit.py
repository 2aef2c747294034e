"""The convolution session's GPU path on the CPU, with the defenses of nnbench/audit.py: the forward and backward
'kernels' are stand-ins over host arrays (the float64 reference, rounded to float32, is the honest one), put in
place of the direct paths' launches. Each cheat is a planted defect in the stand-in: it is caught by the defense
that names it, and passes with that defense off."""

from __future__ import annotations

import numpy as np
import pytest

from nnbench import audit, measure, registry
from nnbench.workloads.base import Case
from nnbench.workloads.conv import session as conv
from nnbench.workloads.conv.problem import ConvShape
from nnbench.workloads.conv.reference import conv_backward_reference, conv_reference
from nnbench.workloads.conv.variants import VARIANTS
from tests.standins import HostArrayGpu

SHAPE = ConvShape(2, 3, 8, 8, 4, 3, 1, 1)
SETTINGS = measure.TimingSettings(budget_s=0.01, min_samples=3, energy=False)


class Cheat:
    """How the stand-in misbehaves after its first `after` launches: None (never), 'lazy' (returns at once),
    'cached' (copies the answer it made last into the output, whatever the inputs), 'edits' (works, then
    negates both of its inputs, which leaves its answer as it was)."""

    def __init__(self, kind: str | None = None, after: int = 2) -> None:
        self.kind, self.after, self.launches, self.last = kind, after, 0, None

    def run(self, outputs: list[np.ndarray], inputs: list[np.ndarray], answer) -> None:
        self.launches += 1
        cheating = self.kind is not None and self.launches > self.after
        if cheating and self.kind == "lazy":
            return
        if cheating and self.kind == "cached" and self.last is not None:
            for o, v in zip(outputs, self.last):
                o[...] = v
            return
        got = answer()
        for o, v in zip(outputs, got):
            o[...] = v.astype(np.float32)
        self.last = got
        if cheating and self.kind == "edits":
            for x in inputs:
                x *= -1


def forward_row(monkeypatch, cheat: Cheat, rtol=None, off=()):
    def launch(backend, v, params, comp, layer):
        return lambda: cheat.run([layer.Y], [layer.X, layer.Wt],
                                 lambda: [conv_reference(layer.X, layer.Wt, SHAPE.stride, SHAPE.pad)])
    monkeypatch.setattr(conv, "direct_launch", launch)
    return row(monkeypatch, registry.find(VARIANTS, "conv", "direct"), rtol, off)


def backward_row(monkeypatch, cheat: Cheat, rtol=None, off=()):
    def launch(backend, params, comp, layer, bufs):
        return lambda: cheat.run([bufs["dX"], bufs["dW"]], [layer.X, layer.Wt, bufs["dY"]],
                                 lambda: conv_backward_reference(layer.X, layer.Wt, bufs["dY"], SHAPE.stride,
                                                                 SHAPE.pad))
    monkeypatch.setattr(conv, "direct_backward_launch", launch)
    return row(monkeypatch, registry.find(VARIANTS, "conv", "direct-backward"), rtol, off)


def row(monkeypatch, v, rtol, off) -> dict:
    monkeypatch.setattr(audit, "ENABLED", set(audit.DEFENSES) - set(off))
    session = conv.ConvSession(HostArrayGpu(), SETTINGS, rtol, 0, {})
    session.prepare(SHAPE)
    return session.run_case(Case(v, tuple(v.defaults().items())), SHAPE, object())


ROWS = [forward_row, backward_row]


@pytest.mark.parametrize("make", ROWS)
def test_the_honest_path_passes_every_defense(monkeypatch, make):
    rec = make(monkeypatch, Cheat())
    assert rec["status"] == "PASS" and not rec.get("error"), rec
    assert rec["samples"] >= SETTINGS.min_samples


@pytest.mark.parametrize("make", ROWS)
@pytest.mark.parametrize("kind, caught", [
    ("lazy", {audit.TIMED_OUTPUT, audit.FRESH_BUFFERS}),  # right on the check's launches only: poison stays
    ("cached", {audit.FRESH_BUFFERS}),  # the old answer copied: right for the inputs it has seen, not for new ones
    ("edits", {audit.INPUTS_UNCHANGED}),  # right answers, edited inputs
])
def test_each_conv_cheat_is_caught_and_passes_with_its_defenses_off(monkeypatch, make, kind, caught):
    rec = make(monkeypatch, Cheat(kind))
    assert rec["status"] == "FAIL", rec
    assert {d for d in audit.DEFENSES if f"{d}:" in rec["error"]} == caught, rec["error"]
    rec = make(monkeypatch, Cheat(kind), off=tuple(caught))
    assert rec["status"] == "PASS" and not rec.get("error"), rec


@pytest.mark.parametrize("make", ROWS)
def test_a_limit_that_zeros_pass_fails_the_row(monkeypatch, make):
    """With a tolerance above max |ref| / magnitude an output of zeros would pass the conditioned check."""
    rec = make(monkeypatch, Cheat(), rtol=1.0)
    assert rec["status"] == "FAIL" and "zero-output:" in rec["error"], rec
    assert make(monkeypatch, Cheat(), rtol=1.0, off=(audit.ZERO_OUTPUT,))["status"] == "PASS"


def test_zeros_pass_the_conditioned_check_only_at_the_largest_ratio():
    ref, mag = np.array([0.5, -0.2]), np.array([1.0, 1.0])
    error = conv._conditioned(mag)
    assert audit.zeros_pass(ref, 0.5, error) and not audit.zeros_pass(ref, 0.49, error)
    assert not audit.zeros_pass(ref, 0.5)  # norm-wise: an all-zero output is 1 off


def test_lenet_step_audits_name_a_fresh_model_that_fails_and_a_limit_that_unmoved_weights_pass():
    from nnbench.workloads.conv import lenet
    params = lenet.init_params(0)
    moved = [(W + 0.01, b + 0.01) for W, b in params]
    stats = measure.summarize([1.0, 1.0, 1.0])
    found = dict(lenet.step_audits(stats, params, moved, 1e-3, lambda: 0.5))
    assert "other addresses" in found[audit.FRESH_BUFFERS] and found[audit.ZERO_OUTPUT] is None
    found = dict(lenet.step_audits(stats, params, moved, 1.0, lambda: 1e-4))
    assert found[audit.FRESH_BUFFERS] is None
    assert "never move" in found[audit.ZERO_OUTPUT]


def test_a_trained_last_batch_fails_weights_that_stay_or_turn_nan():
    """audit.trained, the last timed step of the trainers and LeNet-5: its intermediate output poisoned before it
    (here `h`), the weights read after it must be finite and must have moved."""
    w, h = np.ones(4), np.zeros(2)

    def poison():
        h[:] = np.nan

    def step(writes_h: bool = True, moves: bool = True):
        if writes_h:
            h[:] = 0.5
        if moves:
            w[:] += h.sum()

    def audited(**how) -> str | None:
        w[:], h[:] = 1.0, 0.0
        last = audit.trained(lambda: w.copy(), poison)
        last.poison()
        step(**how)
        return last.check()
    assert audit.trained(lambda: w.copy(), poison).single
    assert audited() is None
    assert "did not move" in audited(moves=False)
    assert "NaN" in audited(writes_h=False)
