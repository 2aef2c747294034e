"""scripts/workflow_local.py runs the GitHub workflow's steps as a self-hosted runner would, where GitHub cannot be
reached: these check that it decides and runs steps as GitHub does, on a small workflow and on the real one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "workflow_local.py"

SMALL = """
name: small
on: push
jobs:
  one:
    runs-on: [self-hosted]
    env:
      SHA: ${{ github.sha }}
    steps:
      - uses: actions/checkout@v4
      - name: write
        env:
          SECRET: ${{ secrets.NOT_SET }}
        run: |
          echo "## run $SHA" >> "$GITHUB_STEP_SUMMARY"
          echo "FROM_EARLIER=yes" >> "$GITHUB_ENV"
          echo "secret=[$SECRET]" > seen.txt
          mkdir -p results && echo '{}' > "results/ci-$SHA.json"
      - name: reads the env file
        run: test "$FROM_EARLIER" = yes && echo ok >> "$GITHUB_STEP_SUMMARY"
      - name: main only
        if: github.event_name == 'push' && github.ref == 'refs/heads/main'
        run: echo main >> "$GITHUB_STEP_SUMMARY"
      - name: fails
        run: false | cat
      - name: after a failure
        run: echo never >> "$GITHUB_STEP_SUMMARY"
      - name: always, where the file exists
        if: always() && hashFiles(format('results/ci-{0}.json', github.sha)) != ''
        run: echo always >> "$GITHUB_STEP_SUMMARY"
      - name: always, where it does not
        if: always() && hashFiles('results/none.json') != ''
        run: echo never >> "$GITHUB_STEP_SUMMARY"
"""


def run(tmp_path, workflow, *args):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(SCRIPT), str(out), "--workflow", str(workflow), "--sha", "abc123",
                          *args], capture_output=True, text=True, cwd=ROOT)
    steps = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()] if (out / "steps.jsonl").exists() \
        else []
    return res, {s["name"]: s for s in steps}, out


def test_steps_run_as_a_runner_runs_them(tmp_path):
    wf = tmp_path / "small.yml"
    wf.write_text(SMALL)
    ws = tmp_path / "ws"
    ws.mkdir()
    res, steps, out = run(tmp_path, wf, "--workspace", str(ws))
    assert res.returncode == 1, res.stderr  # a step failed (pipefail: `false | cat` fails)
    assert steps["fails"]["rc"] != 0 and steps["after a failure"]["ran"].startswith("no")
    assert steps["actions/checkout@v4"]["ran"].startswith("no: uses")
    assert (ws / "seen.txt").read_text().strip() == "secret=[]"
    assert (out / "summary.md").read_text().split() == ["##", "run", "abc123", "ok", "main", "always"]
    _, steps, _ = run(tmp_path, wf, "--workspace", str(ws), "--event", "pull_request", "--ref", "refs/pull/7/merge")
    assert steps["main only"]["ran"].startswith("no")


def test_the_real_workflow_records_history_on_main_pushes_only(tmp_path):
    ws = tmp_path / "ws"
    (ws / "results").mkdir(parents=True)
    (ws / "results" / "ci-abc123.json").write_text("{}")  # what the gate's step writes
    wf = ROOT / ".github" / "workflows" / "gpu-regression.yml"
    decided = {}
    events = (("push", "refs/heads/main"), ("push", "refs/heads/topic"), ("pull_request", "refs/pull/7/merge"))
    for event, ref in events:
        _, steps, _ = run(tmp_path, wf, "--workspace", str(ws), "--dry-run", "--event", event, "--ref", ref)
        decided[event, ref] = {name for name, s in steps.items() if s["ran"] == "would run"}
    history = "Record the run into the history (main only)"
    against = "Regression gate (against the history's last stable segment)"
    assert history in decided["push", "refs/heads/main"] and against in decided["push", "refs/heads/main"]
    assert history not in decided["push", "refs/heads/topic"] | decided["pull_request", "refs/pull/7/merge"]
    assert against in decided["pull_request", "refs/pull/7/merge"]
    assert all("GPU tests" in d and "Regression gate (against the committed baseline of 10 runs)" in d
               for d in decided.values())


@pytest.mark.parametrize("args, needle", [(["--skip", "nope"], "no such step"),
                                          (["--replace", "nope=true"], "no such step")])
def test_a_step_name_that_is_not_there_is_one_line_exit_2(tmp_path, args, needle):
    wf = tmp_path / "small.yml"
    wf.write_text(SMALL)
    res, _, _ = run(tmp_path, wf, *args)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
