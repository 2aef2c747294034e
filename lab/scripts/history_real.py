"""`check --against-history` on real H100 data: helper stats' measurement runs (lab/data/measurement, commit
21583faabcf2, 2026-11-24; lab/journal/measurement.md) recorded into a history, then each later run checked
against it. CPU only: the data are committed.

    python lab/scripts/history_real.py [--tolerance 0.02] [--db /tmp/real.sqlite]

History: the 40 identical runs of configs/ci.yaml's GPU cases in pairs.jsonl.gz (29 cases each, raw samples).
Checked against it, one at a time: the 20 clean and 20 planted (+3.67%, PLANT_SLOWDOWN in the direct
convolution) runs of planted.jsonl (one case each), and each of the 40 runs against the other 39.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import tempfile
from pathlib import Path

from nnbench.history import db, gate, migrations, source, store

DATA = Path(__file__).resolve().parents[2] / "lab" / "data" / "measurement"


def split(lines: list[str]) -> dict[str, list[str]]:
    """The records of a JSON results file grouped by their sweep label (one label per run)."""
    out = collections.defaultdict(list)
    for line in lines[1:]:
        if line.strip():
            out[json.loads(line)["sweep"]].append(line)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tolerance", type=float, default=0.02)
    args = ap.parse_args()
    pairs = gzip.open(DATA / "pairs.jsonl.gz", "rt").read().split("\n")
    planted = (DATA / "planted.jsonl").read_text().split("\n")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        runs = split(pairs)
        files = {}
        for label, lines in runs.items():
            files[label] = tmp / f"{label}.json"
            files[label].write_text("\n".join([pairs[0], *lines]) + "\n")
        target = str(tmp / "history.sqlite")
        with db.connect(target) as d:
            migrations.ready(d)
            for f in files.values():
                for run in source.read(f):
                    store.record(d, run)
        print(f"history: {len(files)} runs of {len(next(iter(runs.values())))} cases (pairs.jsonl.gz); "
              f"tolerance {100 * args.tolerance:g}%")

        def verdicts(path) -> collections.Counter:
            return collections.Counter(v.verdict for v in gate.check(target, path, args.tolerance).verdicts)
        for prefix, what in (("clean-", "clean runs (planted.jsonl)"), ("plant3-", "planted +3.67% runs")):
            total = collections.Counter()
            for label, lines in split(planted).items():
                if label.startswith(prefix):
                    f = tmp / f"{label}.json"
                    f.write_text("\n".join([planted[0], *lines]) + "\n")
                    total += verdicts(f)
            print(f"{what}: {dict(total)}")
        # each run of the history against the other 39 (the gate leaves a run's own record out of its history)
        total = collections.Counter()
        for f in files.values():
            total += verdicts(f)
        print(f"each of the {len(files)} history runs against the other {len(files) - 1}: {dict(total)}")


if __name__ == "__main__":
    main()
