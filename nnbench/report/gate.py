"""The gate's verdicts as text for machines and pull requests: markdown (a GitHub step summary or a PR
comment), JSON (for scripts and the history database) and JUnit XML (CI annotations: one test case
per benchmark case, a failure for each verdict that fails the gate)."""

from __future__ import annotations

import json
import math
from xml.sax.saxutils import escape, quoteattr

from nnbench import verdict as verdict_mod

FORMATS = ("table", "markdown", "json", "junit")


def _change(v) -> str:
    c = v.change
    return f"{100 * c:+.1f}%" if c is not None else "—"


def _ms(x) -> str:
    return f"{x:.4f}" if x is not None else "—"


def summary_counts(verdicts) -> dict[str, int]:
    return {name: n for name in verdict_mod.VERDICTS if (n := sum(v.verdict == name for v in verdicts))}


def markdown(verdicts, title: str, passed: bool, notes: list[str], show_same: bool = False) -> str:
    lines = [f"### nnbench check: {'passed' if passed else 'FAILED'}", "", title, ""]
    counts = summary_counts(verdicts)
    lines.append(" · ".join(f"**{n}** {name}" for name, n in counts.items()) or "no cases")
    lines.append("")
    geo = verdict_mod.geomean_change(verdicts)
    if geo:
        lines += ["| workload | geometric-mean change | cases |", "| --- | ---: | ---: |"]
        lines += [f"| {s} | {100 * g:+.2f}% | {n} |" for s, (g, n) in sorted(geo.items())]
        lines.append("")
    shown = [v for v in verdicts if show_same or v.verdict != "SAME"]
    if shown:
        lines += ["| verdict | workload | variant | params | shape | baseline ms | current ms | change | test | note |",
                  "| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
        for v in shown:
            cells = [v.verdict, v.workload, v.variant, v.params, v.shape, _ms(v.base_ms), _ms(v.cur_ms), _change(v),
                     verdict_mod.test_label(v), v.why]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    lines += [f"> {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


def to_json(verdicts, baseline: str, current: str, tolerance: float, passed: bool, notes: list[str]) -> str:
    return json.dumps(document(verdicts, baseline, current, tolerance, passed, notes), indent=1) + "\n"


def document(verdicts, baseline: str, current: str, tolerance: float, passed: bool, notes: list[str]) -> dict:
    """The gate's verdicts as one JSON object: `--format json` prints it, `--json FILE` keeps it (docs/JSON.md)."""
    def num(x):
        return x if x is None or math.isfinite(x) else str(x)
    doc = {
        "baseline": baseline, "current": current, "tolerance": tolerance, "passed": passed,
        "counts": summary_counts(verdicts),
        "geomean_change": {w: {"change": g, "cases": n} for w, (g, n) in verdict_mod.geomean_change(verdicts).items()},
        "notes": notes,
        "cases": [{"verdict": v.verdict, "workload": v.workload, "variant": v.variant, "params": v.params,
                   "shape": v.shape, "base_ms": num(v.base_ms), "cur_ms": num(v.cur_ms), "change": num(v.change),
                   "method": v.method, "p_value": num(v.p_value), "base_samples": v.base_n, "cur_samples": v.cur_n,
                   "why": v.why}
                  for v in verdicts],
    }
    return doc


def junit(verdicts, title: str, allow_missing: bool, allow_unstable: bool) -> str:
    """One <testsuite> per nnbench workload; a gating verdict is a <failure> (FAILED and INVALID an <error>),
    SKIPPED a <skipped>."""
    gating = verdict_mod.GATING - ({"MISSING"} if allow_missing else set()) - \
        (verdict_mod.UNSURE if allow_unstable else set())
    by_workload: dict[str, list] = {}
    for v in verdicts:
        by_workload.setdefault(v.workload or "nnbench", []).append(v)
    out = ['<?xml version="1.0" encoding="UTF-8"?>', f"<testsuites name={quoteattr(title)}>"]
    for workload, vs in sorted(by_workload.items()):
        fails = sum(v.verdict in gating and v.verdict not in ("FAILED", "INVALID") for v in vs)
        errors = sum(v.verdict in gating and v.verdict in ("FAILED", "INVALID") for v in vs)
        skipped = sum(v.verdict == "SKIPPED" for v in vs)
        out.append(f'  <testsuite name={quoteattr(workload)} tests="{len(vs)}" failures="{fails}" errors="{errors}" '
                   f'skipped="{skipped}">')
        for v in vs:
            name = " ".join(x for x in (v.variant, v.params, v.shape) if x)
            time_s = (v.cur_ms or 0) / 1e3
            out.append(f"    <testcase classname={quoteattr(f'nnbench.{workload}')} name={quoteattr(name)} "
                       f'time="{time_s:.6f}">')
            msg = f"{v.verdict} {_change(v)}" + (f": {v.why}" if v.why else "")
            if v.verdict in gating:
                tag = "error" if v.verdict in ("FAILED", "INVALID") else "failure"
                out.append(f"      <{tag} type={quoteattr(v.verdict)} message={quoteattr(msg)}>{escape(msg)}</{tag}>")
            elif v.verdict == "SKIPPED":
                out.append(f"      <skipped message={quoteattr(msg)}/>")
            else:
                out.append(f"      <system-out>{escape(msg)}</system-out>")
            out.append("    </testcase>")
        out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"
