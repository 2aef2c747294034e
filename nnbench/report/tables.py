"""Rich tables for every command: the GEMM ladder, a sweep's plan and summary, regression verdicts.

Records in, tables out; nothing here measures or decides anything.
"""

from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

STATUS_STYLE = {"PASS": "green", "REFERENCE": "cyan", "FAIL": "bold red", "ERROR": "bold red", "SKIP": "yellow",
                "SLOWER": "bold red",
                "FAILED": "bold red", "INVALID": "bold red", "FASTER": "green", "SAME": "", "MISSING": "bold yellow",
                "NEW": "cyan", "SKIPPED": "yellow", "UNSTABLE": "bold magenta", "AMBIGUOUS": "bold magenta",
                "SUSPECT": "bold magenta"}


def _num(v, fmt: str, missing: str = "—") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return missing
    return format(v, fmt)


def _status(word: str) -> Text:
    return Text(word, style=STATUS_STYLE.get(word, ""))


FELL_BACK = "†"
FELL_BACK_NOTE = (f"{FELL_BACK} timed host-issued, so host launch gaps are in its time: the blocking kernel timed out "
                  "on this launch (it synchronizes inside), or the row is host work by design (PyTorch eager)")


def _median(r: dict) -> str:
    """The median in ms, marked where the row's timing fell back to host-issued launches."""
    mark = FELL_BACK if r.get("timing") == "host-issued" else ""
    return _num(r.get("median_ms"), ".4f") + mark


def _mark_fallbacks(t: Table, records: list[dict]) -> Table:
    if any(r.get("timing") == "host-issued" for r in records):
        t.caption, t.caption_justify = FELL_BACK_NOTE, "left"
    return t


def gemm_table(records: list[dict], title: str) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name, justify in [("variant", "left"), ("params", "left"), ("M×N×K", "left"), ("median ms", "right"),
                          ("±IQR", "right"), ("GFLOP/s", "right"), ("%peak", "right"), ("%vendor", "right"),
                          ("×naive", "right"), ("regs", "right"), ("smem", "right"), ("spill", "right"),
                          ("occ", "right"), ("rel_err", "right"), ("", "left")]:
        t.add_column(name, justify=justify, no_wrap=name in ("variant", "M×N×K"))
    for r in records:
        t.add_row(
            f"{r['step']:>2} {r['variant']}" if r.get("step") not in (None, "") else r["variant"],
            r.get("params") or "",
            r.get("shape") or "",
            _median(r),
            _num(None if r.get("median_ms") is None else 100 * r["iqr_ms"] / r["median_ms"], ".1f") + "%"
            if r.get("median_ms") else "—",
            _num(r.get("gflops"), ",.0f"),
            _num(r.get("pct_peak"), ".1f"),
            _num(r.get("pct_vendor"), ".1f"),
            _num(r.get("speedup"), ".1f"),
            _num(r.get("registers"), "d"),
            _num(r.get("smem_bytes") / 1024 if r.get("smem_bytes") is not None else None, ".1f", "—") + "K"
            if r.get("smem_bytes") is not None else "—",
            _num(r.get("local_bytes"), "d"),
            _num(100 * r["occupancy"] if r.get("occupancy") is not None else None, ".0f") + "%"
            if r.get("occupancy") is not None else "—",
            _num(r.get("rel_err"), ".1e"),
            _status(r["status"]),
        )
    return _mark_fallbacks(t, records)


def _pct_iqr(r: dict) -> str:
    return f"{100 * r['iqr_ms'] / r['median_ms']:.1f}%" if r.get("median_ms") and r.get("iqr_ms") is not None else "—"


def plan_table(counts, runs: dict[str, int], title: str) -> Table:
    """How each variant's axes became cases: the product, what restrictions and rules excluded, and
    `runs`, the (case, shape) pairs a run runs of each (a case runs only on the shapes it applies to:
    a per-sample trainer not on a mini-batch problem)."""
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name in ("variant", "product", "restricted", "invalid", "cases", "× shapes"):
        t.add_column(name, justify="left" if name == "variant" else "right")
    tot = [0, 0, 0, 0]
    for c in counts:
        t.add_row(c.variant, str(c.product), str(c.restricted), str(c.invalid), str(c.cases),
                  str(runs.get(c.variant, 0)))
        tot = [a + b for a, b in zip(tot, (c.product, c.restricted, c.invalid, c.cases))]
    t.add_row("total", *map(str, tot), str(sum(runs.get(c.variant, 0) for c in counts)), style="bold")
    return t


def sweep_table(rows: list[dict], baseline: str | None, title: str) -> Table:
    """Per shape, each variant's best parameters; ★ marks the fastest nnbench kernel."""
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name, justify in [("shape", "left"), ("variant", "left"), ("best params", "left"), ("median ms", "right"),
                          ("±IQR", "right"), ("GFLOP/s", "right"), ("%peak", "right"), ("%vendor", "right"),
                          (f"×{baseline}" if baseline else "speedup", "right"), ("cases", "right")]:
        t.add_column(name, justify=justify, no_wrap=name in ("shape", "variant"))
    last = None
    for r in rows:
        tally = r.get("tally", {})
        cases = f"{tally.get('PASS', 0)}/{sum(tally.values())}"
        bad = {k: n for k, n in tally.items() if k != "PASS" and n}
        if bad:
            cases += " (" + ", ".join(f"{n} {k}" for k, n in sorted(bad.items())) + ")"
        t.add_row(r["shape"] if r["shape"] != last else "", ("★ " if r.get("best") else "  ") + r["variant"],
                  r.get("params") or "", _median(r), _pct_iqr(r), _num(r.get("gflops"), ",.0f"),
                  _num(r.get("pct_peak"), ".1f"), _num(r.get("pct_vendor"), ".1f"), _num(r.get("speedup"), ".2f"),
                  cases, end_section=False)
        last = r["shape"]
    return _mark_fallbacks(t, rows)


def verdict_table(verdicts, title: str, show_same: bool = True) -> Table:
    from nnbench.verdict import test_label
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name, justify in [("verdict", "left"), ("variant", "left"), ("params", "left"), ("shape", "left"),
                          ("baseline ms", "right"), ("current ms", "right"), ("change", "right"),
                          ("test", "left"), ("note", "left")]:
        t.add_column(name, justify=justify, no_wrap=name in ("verdict", "variant", "shape"))
    for v in verdicts:
        if v.verdict == "SAME" and not show_same:
            continue
        change = v.change
        t.add_row(_status(v.verdict), v.variant, v.params, v.shape, _num(v.base_ms, ".4f"), _num(v.cur_ms, ".4f"),
                  f"{100 * change:+.1f}%" if change is not None else "—", test_label(v), v.why)
    return t


def train_table(records: list[dict], title: str) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name in ("version", "iterations", "conv", "error", "µs/iter", "µs/ff", "×seq", "train acc", "test acc",
                 "launches", "thr/launch", "×seq/thr", "×seq/busy", "GFLOP/s", "%peak", "check", ""):
        t.add_column(name, justify="left" if name in ("version", "") else "right", no_wrap=name == "version")
    for r in records:
        t.add_row(r.get("variant") or r.get("version"), _num(r.get("iterations"), ",d"),
                  "yes" if r.get("converged") else "no",
                  _num(r.get("final_error"), ".1e"), _num(r.get("us_per_iteration"), ",.1f"),
                  _num(r.get("us_per_feedforward"), ",.1f"), _num(r.get("speedup_vs_sequential"), ".1f"),
                  _pct(r.get("train_accuracy"), ".0f"), _pct(r.get("test_accuracy"), ".1f"),
                  _num(r.get("launches_per_iteration"), "d"), _num(r.get("threads_per_launch"), ",.0f"),
                  _num(r.get("speedup_per_thread"), ".2g"), _num(r.get("speedup_per_busy_core"), ".2g"),
                  _num(r.get("gflops"), ",.1f"), _num(r.get("pct_peak"), ".2f"),
                  _num(r.get("weights_rel_err"), ".1e"), _status(r.get("status", "")))
    return t


def batch_table(records: list[dict], title: str) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    parallel = any((r.get("ranks") or 1) > 1 for r in records)
    names = ["version", "µs/step", "±IQR", "samples/s", "TFLOP/s", "GEMM µs", "other µs", "rest µs", "×cuBLAS GEMMs",
             "launches", "steps", "error", "train acc", "test acc", "check", ""]
    if parallel:  # the allreduce calls timed alone, and what of them the step does not hide (step - compute)
        names[8:8] = ["allreduce µs", "exposed µs"]
    for name in names:
        t.add_column(name, justify="left" if name in ("version", "") else "right", no_wrap=name == "version")
    for r in records:
        comm = [_num(r.get("comm_us"), ",.1f"), _num(r.get("exposed_us"), ",.1f")] if parallel else []
        t.add_row(r.get("variant") or r.get("version"), _num(r.get("us_per_step"), ",.1f"),
                  _num(r.get("step_iqr_pct"), ".1f") + "%",
                  _num(r.get("samples_per_s"), ",.0f"), _num(r.get("tflops"), ".2f"), _num(r.get("gemm_us"), ",.1f"),
                  _num(r.get("other_us"), ",.1f"), _num(r.get("rest_us"), ",.1f"), *comm,
                  _num(r.get("vs_cublas_gemms"), ".2f"),
                  _num(r.get("launches_per_step"), "d"), _num(r.get("steps"), ",d"), _num(r.get("final_error"), ".2e"),
                  _pct(r.get("train_accuracy"), ".0f"), _pct(r.get("test_accuracy"), ".1f"),
                  _num(r.get("weights_rel_err"), ".1e"), _status(r.get("status", "")))
    return t


def _pct(fraction, fmt: str) -> str:
    return _num(None if fraction is None else 100 * fraction, fmt) + "%"


def profile_tables(prof) -> list:
    """The sections of `nnbench profile` (nnbench.profiling.profile.Profile) as rich tables."""
    from nnbench.profiling import ncu, sass
    from nnbench.profiling.profile import fidelity_pct, useful_note
    params = " ".join(f"{k}={v}" for k, v in prof.params.items())
    out = []
    t = Table(title=f"{prof.variant.name} {params} · resources on {prof.device} ({prof.arch})", title_justify="left",
              header_style="bold", pad_edge=False)
    for name in ("kernel", "threads", "registers", "static smem", "spill bytes", "stack", "blocks/SM", "occupancy",
                 "limited by"):
        t.add_column(name, justify="left" if name in ("kernel", "limited by") else "right")
    for k in prof.kernels:
        t.add_row(k.kernel, str(k.threads), str(k.registers), f"{k.smem_bytes:,}", str(k.spill_bytes),
                  str(k.stack_bytes), str(k.blocks_per_sm), f"{100 * k.occupancy:.0f}%", k.limiter)
    out.append(t)
    t = Table(title="instruction mix (SASS)", title_justify="left", header_style="bold", pad_edge=False)
    cats = [c for c, _ in sass.CATEGORIES] + ["rest", "total"]
    for name in ("kernel", "where", *cats, "useful"):
        t.add_column(name, justify="left" if name in ("kernel", "where", "useful") else "right")
    for k in prof.kernels:
        if k.mix is None:
            t.add_row(k.kernel, k.mix_note, *[""] * len(cats), "")
            continue
        where = k.mix_note + (f" 0x{k.loop[0]:x}-0x{k.loop[1]:x}" if k.loop else "")
        t.add_row(k.kernel, where, *[str(k.mix[c]) for c in cats], useful_note(k.mix))
    out.append(t)
    r = prof.record
    if r is not None:
        what = f"{prof.problem.label}, per {r.get('unit') or 'launch'}"
        t = Table(title=f"achieved · {what}", title_justify="left", header_style="bold", pad_edge=False)
        for name in ("time", "±IQR", "TFLOP/s", "GB/s (fewest bytes)", "FLOP/byte", "bound", "roof", "roof TFLOP/s",
                     "% of roof", "compute ceiling", "copy ceiling", "check", ""):
            t.add_column(name, justify="right" if name not in ("", "roof") else "left")
        w, roof, sec = prof.where, prof.roof, prof.seconds
        iqr = 100 * r["iqr_ms"] / r["median_ms"] if r.get("median_ms") and r.get("iqr_ms") is not None else None
        check = r.get("rel_err")
        # a point above its roof gets no percentage (it would pass 100): SUSPECT, and the note below says why
        pct = _status("SUSPECT") if w and w.suspect else _num(w and w.pct_of_roof, ".1f")
        t.add_row(_num(sec and sec * 1e3, ".4f") + " ms", _num(iqr, ".1f") + "%",
                  _num(sec and prof.flops / sec / 1e12, ".3f"), _num(sec and prof.bytes / sec / 1e9, ",.0f"),
                  _num(w and w.intensity, ".2f"), w.bound if w else "—",
                  f"{roof.name} ({roof.source})" if roof else f"none for {r.get('precision') or 'this precision'}",
                  _num(w and w.attainable / 1e12, ".2f"), pct, _num(roof and roof.flops / 1e12, ".1f") + " TFLOP/s",
                  _num(roof and roof.bandwidth / 1e9, ",.0f") + " GB/s", _num(check, ".1e"),
                  _status(r.get("status", "")))
        out.append(t)
        if w and w.suspect:
            out.append(Text(w.suspect, style=STATUS_STYLE["SUSPECT"]))
    if prof.ncu is not None:
        t = Table(title="Nsight Compute (one launch, --clock-control none, --cache-control none)",
                  title_justify="left", header_style="bold", pad_edge=False)
        t.add_column("metric", justify="left")
        t.add_column("value", justify="right")
        for metric, label in ncu.labels(True).items():
            if metric in prof.ncu:
                v, unit = prof.ncu[metric]
                t.add_row(label, f"{v:,.2f} {unit}".strip())
        for stall, v in ncu.top_stalls(prof.ncu):
            t.add_row(f"stall: {stall}", f"{v:.2f} cycles per issue")
        fid = fidelity_pct(prof)
        if fid is not None:
            t.add_row("nnbench median vs ncu duration",
                      f"{r['median_ms']:.4f} ms vs {prof.ncu_ms:.4f} ms ({fid:+.1f}%)")
        out.append(t)
    if prof.split is not None:
        out += split_tables(prof.split)
    return out


SPLIT_SCALE = {"us": 1e6, "ms": 1e3}
CEILING_LABELS = {"handoff_us": "SM-to-SM handoff (one way)", "grid_barrier_us": "grid barrier (one block per SM)"}


def split_tables(split) -> list:
    """`nnbench profile --split KIND` (nnbench.workloads.base.TimeSplit): one row per part with its times
    and share of the whole unit, a row of their sum, the whole, and the ceilings and the check beneath."""
    unit, scale = split.display, SPLIT_SCALE[split.display]
    check = (f"float64 check: rel_err {_num(split.rel_err, '.1e')} against {_num(split.rtol, '.1e')} ")
    if split.status != "PASS":
        return [Text(f"{split.kind}: not timed: the build they are timed on failed its {check}",
                     style=STATUS_STYLE["FAIL"])]
    t = Table(title=f"{split.kind} · per {split.unit} · {split.how}", title_justify="left", header_style="bold",
              pad_edge=False)
    t.add_column(split.kind.removesuffix("s"), justify="left")
    for name in split.counts:
        t.add_column(name, justify="right")
    for name in split.timed:
        t.add_column(f"{name} {unit}", justify="right")
    t.add_column(f"share of the {split.unit}", justify="right")
    fmt = ".3f" if unit == "us" else ".4f"
    for r in split.rows:
        t.add_row(r["part"], *[str(r[c]) for c in split.counts], *[_num(r[c] * scale, fmt) for c in split.timed],
                  _num(split.share(r) and 100 * split.share(r), ".1f") + "%")
    sums = [sum(r[c] for r in split.rows) for c in split.timed]
    t.add_row(f"all {split.kind}", *[""] * len(split.counts), *[_num(x * scale, fmt) for x in sums],
              _num(split.whole_s and 100 * split.parts_s / split.whole_s, ".1f") + "%", style="bold")
    out: list = [t, Text(f"the {split.unit} timed whole: {_num(split.whole_s and split.whole_s * scale, fmt)} {unit}")]
    if split.ceiling_values:
        out.append(Text("ceilings (measured now): " + ", ".join(
            f"{CEILING_LABELS.get(k, k)} {v:.3f} {'us' if k.endswith('_us') else ''}".rstrip()
            for k, v in split.ceiling_values.items())))
    out.append(Text("; ".join([*split.notes, check + "PASS"])))
    return out


def conv_table(records: list[dict], title: str) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name in ("path", "params", "precision", "layer", "ms", "±IQR", "GFLOP/s", "% cuDNN", "× direct", "workspace",
                 "rel_err", ""):
        t.add_column(name, justify="left" if name in ("path", "params", "precision", "layer", "") else "right")
    for r in records:
        iqr = 100 * r["iqr_ms"] / r["median_ms"] if r.get("iqr_ms") is not None and r.get("median_ms") else None
        ws = r.get("workspace_bytes")
        t.add_row(f"{r.get('step', '')} {r['variant']}".strip(), r.get("params", ""), r.get("precision") or "",
                  r["shape"],
                  _median(r), _num(iqr, ".1f") + "%", _num(r.get("gflops"), ",.0f"),
                  _num(r.get("pct_vendor"), ".1f"), _num(r.get("speedup"), ".1f"),
                  f"{ws / 2**20:,.1f} MiB" if ws else "—", _num(r.get("rel_err"), ".1e"),
                  _status(r.get("status", "")))
    return _mark_fallbacks(t, records)
