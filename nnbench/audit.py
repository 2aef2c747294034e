"""Defenses against a kernel that games the timer: each a default, each named in the row that it caught.

A kernel that nnbench runs may be a user's own `.cu`, so the verifier does not trust that the launches it
times are the launch it checked. Harnesses have been beaten by results cached across calls, outputs only
right on the first calls or for buffers seen before, inputs edited to make the next call cheap, all-zero
outputs under loose tolerances, and work moved out of the timed stream. Each defense below closes one:

  timed-output      the outputs are poisoned before the last timed batch and checked after it
                    (measure's `LastBatch`): a kernel that works only while it is watched, on its first
                    launches or on buffers it has not seen, leaves the poison or stale values there;
  fresh-buffers     after timing, the kernel runs once more on a second input set (other values where the
                    inputs are drawn) at other addresses, against its own reference: a result cached by
                    the kernel and copied afterwards is the answer to the old inputs;
  inputs-unchanged  after timing, every input is compared with its host copy: a kernel that edits its
                    inputs (to make later launches cheap, or to make its answer right) is caught;
  zero-output       a check that an all-zero output would pass cannot tell a kernel that writes zeros from
                    one that works (a reference that is zero, a tolerance of 1 or more): the row fails;
  roofline          a rate above what the device can do (FLOP/s over the precision's peak, or bytes/s over
                    DRAM's for the bytes that cannot sit in L2) is not a measurement: SUSPECT;
  hidden-work       after the last timed batch the whole device is synchronized; a wait longer than
                    HIDDEN_MS and HIDDEN_SHARE of the batch is work that ran outside the timed stream:
                    SUSPECT.

A wrong answer (the first four) is FAIL; a timing that cannot be believed (the last two) is SUSPECT, which
the gate and every command treat as failed (results.FAILED). ENABLED is the set in force; the exploit tests
(tests/test_exploit_defenses.py) switch one off to show what it alone catches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TIMED_OUTPUT, FRESH_BUFFERS, INPUTS_UNCHANGED, ZERO_OUTPUT, ROOFLINE, HIDDEN_WORK = (
    "timed-output", "fresh-buffers", "inputs-unchanged", "zero-output", "roofline", "hidden-work")
DEFENSES = (TIMED_OUTPUT, FRESH_BUFFERS, INPUTS_UNCHANGED, ZERO_OUTPUT, ROOFLINE, HIDDEN_WORK)
SUSPECTING = {ROOFLINE, HIDDEN_WORK}  # the timing is in doubt, not the answer
ENABLED = set(DEFENSES)
# Set by the harness while a sanitized case's process runs (nnbench/sanitize.py's child): compute-sanitizer
# instruments every launch and does its own work between them, so the device-wide wait after the last batch and
# the rate the samples imply measure the tool, not the kernel; the defenses judged from time (SUSPECTING) would
# flag the tool's work as the kernel's. The answer is still the kernel's, so the other four stay in force; the
# parent's row carries no timing (sanitize.UNTIMED).
UNTIMED = [False]

# The device's figures are theoretical: the peak FLOP/s at the maximum boost clock, DRAM's from the memory
# clock and bus width. Measured rates stay below them (the H100's best streaming kernels reach ~90% of DRAM's,
# cuBLAS ~75% of the FP32 peak), so a rate 10% above the figure is no reading error in either direction: the
# clock NVML reports can differ from the one the memory ran at by a few percent, never by ten.
ROOFLINE_MARGIN = 1.10
# An idle device-wide synchronize costs the host 5-20 us; a host thread descheduled in between can add a
# millisecond on a busy machine. Work hidden per batch below this is not told from that, and is too small
# to matter to the batch's time unless the batch is shorter than it (then HIDDEN_SHARE decides with it).
HIDDEN_MS = 1.0
HIDDEN_SHARE = 0.25


@dataclass
class LastBatch:
    """What `measure` does around the last timed batch: `poison()` before it is queued (outside the events),
    `check()` after it ran, giving a failure's text or None. `single`: the batch is one launch from the poisoned
    state (outputs that are read as well as written change with every launch, so only one launch's result is
    known); otherwise it has the shape of the others and its samples join them."""

    poison: Callable[[], None]
    check: Callable[[], str | None]
    single: bool = False


def enabled(defense: str) -> bool:
    return defense in ENABLED and not (UNTIMED[0] and defense in SUSPECTING)


def roofline(flops: float, nbytes: float, seconds: float, peak_flops: float | None, dram_bytes_per_s: float | None,
             l2_bytes: int | None) -> str | None:
    """Why a launch of `flops` and at least `nbytes` (the fewest one launch can move) in `seconds` is beyond
    the device, or None. The bytes are held to DRAM's rate only for what cannot be in L2: in the best case a
    hot L2 serves `l2_bytes` of them at no cost, so the bound is DRAM's rate over the share that remains
    (unbounded for a problem that fits L2, 1.22x DRAM's at ten times L2, with the margin)."""
    if not seconds > 0:
        return None
    if peak_flops and flops and flops / seconds > ROOFLINE_MARGIN * peak_flops:
        return (f"{flops / seconds / 1e12:,.1f} TFLOP/s is above the device's peak for its precision, "
                f"{peak_flops / 1e12:,.1f} TFLOP/s (the config's `flops` or its `precision` is wrong, or the "
                "kernel did not do the work)")
    if dram_bytes_per_s and nbytes and l2_bytes is not None and nbytes > l2_bytes:
        bound = ROOFLINE_MARGIN * dram_bytes_per_s / (1 - l2_bytes / nbytes)
        if nbytes / seconds > bound:
            return (f"{nbytes / seconds / 1e9:,.0f} GB/s for {nbytes / 1e6:,.1f} MB is above DRAM's "
                    f"{dram_bytes_per_s / 1e9:,.0f} GB/s with {l2_bytes / 1e6:,.0f} MB of it in L2 at best "
                    "(the config's `bytes` is wrong, or the kernel did not move them)")
    return None


def device_roofline(device, precision: str | None, flops: float, nbytes: float, seconds: float) -> str | None:
    """`roofline` against a DeviceInfo (None without one: the CPU backend)."""
    if device is None:
        return None
    return roofline(flops, nbytes, seconds, device.peak_flops(precision), device.dram_peak_bytes, device.l2_bytes)


def hidden_work(settle_ms: float | None, batch_ms: float) -> str | None:
    """Why the device-wide wait after the last timed batch means work outside the timed stream, or None."""
    if settle_ms is None or settle_ms <= max(HIDDEN_MS, HIDDEN_SHARE * batch_ms):
        return None
    return (f"the device was busy {settle_ms:.2f} ms after the last timed batch ({batch_ms:.2f} ms between its "
            "events): work ran outside the timed stream")


def timed_findings(stats) -> list[tuple[str, str | None]]:
    """The two defences `measure` decides from a timed run's Stats (measure.Stats): the last batch's check and the
    device-wide wait after it, each (defense, why it failed or None)."""
    return [(TIMED_OUTPUT, stats.last_failure),
            (HIDDEN_WORK, hidden_work(stats.settle_ms, stats.last_batch_ms or 0.0))]


def zeros_pass(ref: np.ndarray, limit: float, error: Callable[[np.ndarray, np.ndarray], float] | None = None) -> bool:
    """Whether an all-zero output passes the check against `ref` at `limit`. The norm-wise check
    (measure.rel_err): ||0 - ref|| / ||ref|| is 1 for a reference that is not all zero, and the absolute 0 for
    one that is; `error(out, ref)`: the check's own measure instead (measure.conditioned_error with its
    magnitudes, whose value for zeros, max |ref| / magnitude, cancellation can bring below 1)."""
    if error is not None:
        return error(np.zeros(np.shape(ref)), ref) <= limit
    return (1.0 if np.any(np.asarray(ref) != 0) else 0.0) <= limit


def trained(read: Callable[[], np.ndarray], poison: Callable[[], None]) -> LastBatch:
    """The last timed batch of a training step or block, whose weights are read as well as written (so one
    launch from the poisoned state): its intermediate outputs poisoned before it (`poison`), and after it the
    weights (`read()`, flat) must be finite and must have moved. A mid-training step has no cheap float64
    answer; what a launch that skipped its work, or part of it, leaves is the poison, read into the weights, or
    the weights as they were. The float64 check itself runs again on fresh buffers after timing."""
    before: dict[str, np.ndarray] = {}

    def poisoned() -> None:
        before["weights"] = read()
        poison()

    def check() -> str | None:
        after = read()
        if not np.all(np.isfinite(after)):
            return ("the weights after the last timed launch hold NaN or inf: an output poisoned before it was read "
                    "without being written")
        if not changed(before, {"weights": after}):
            return "the weights did not move in the last timed launch: it did not train"
        return None
    return LastBatch(poisoned, check, single=True)


def changed(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> list[str]:
    """The names whose contents differ (bit for bit: a NaN input stays equal to itself)."""
    return [k for k, b in before.items()
            if b.tobytes() != np.ascontiguousarray(after[k]).tobytes()]


def judge(rec: dict, failures: list[tuple[str, str]]) -> dict:
    """`rec` with the enabled defenses' failures applied: FAIL for a wrong answer, else SUSPECT for a timing
    in doubt, each named in `error` ("defense: why"); a row already FAIL or ERROR keeps its status."""
    found = [(d, why) for d, why in failures if why and enabled(d)]
    if not found:
        return rec
    text = "; ".join(f"{d}: {why}" for d, why in found)
    rec["error"] = f"{rec['error']}; {text}" if rec.get("error") else text
    if rec.get("status") in ("PASS", "SUSPECT"):
        rec["status"] = "SUSPECT" if all(d in SUSPECTING for d, _ in found) else "FAIL"
    return rec
