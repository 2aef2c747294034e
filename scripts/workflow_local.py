"""Run .github/workflows/gpu-regression.yml's steps here, as a self-hosted runner would for one event: where GitHub
itself cannot be reached (this project's sandbox, a lent GPU machine), this is how the workflow is exercised end to
end instead of being kept consistent with the CLI by hand.

  python3 scripts/workflow_local.py OUT_DIR [--event push|pull_request] [--ref refs/heads/main]
        [--replace 'STEP NAME=COMMANDS'] [--skip 'STEP NAME'] [--dry-run] [--workspace DIR] [--workflow FILE]
        [--tool-cache DIR]

What a runner does, and this does too:
- each `run:` step in order, in `bash --noprofile --norc -eo pipefail` (GitHub's default shell on Linux), in the
  workspace (the tree's root unless --workspace), with the job's and the step's `env:`, `GITHUB_STEP_SUMMARY`,
  `GITHUB_ENV` (its NAME=value lines reach the later steps), `GITHUB_SHA`, `GITHUB_REF`, `GITHUB_EVENT_NAME`,
  `GITHUB_WORKSPACE` and `RUNNER_TOOL_CACHE` (--tool-cache, default OUT_DIR/tool-cache: a runner keeps it between
  jobs, so pass one folder to several runs);
- `if:` decided as GitHub does for the expressions the workflow uses (`always()`, `success()`, `==`, `!=`, `&&`,
  `||`, `github.*`, `hashFiles(format(...))`); a step without one runs only while every earlier step succeeded;
- `${{ ... }}` in `env:` values expanded (`secrets.*` empty unless NNBENCH_SECRET_<NAME> is set here).
What it does not: `uses:` steps are not run (the checkout is this tree; for upload-artifact it lists the files that
would be uploaded, by its `path:` globs). `--replace` swaps a step's commands (an offline machine's install) and
`--skip` leaves a step out; the log says so for each.

Writes OUT_DIR/steps.jsonl (one line a step: name, ran or why not, exit code, seconds), OUT_DIR/summary.md (the
step summary), OUT_DIR/step-NN.log. Exit 0 if every step that ran succeeded, else 1; bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github/workflows/gpu-regression.yml"
SHELL = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class Context:
    """What `${{ }}` and `if:` read: github.*, secrets.*, and whether the job has failed so far."""

    def __init__(self, event: str, ref: str, sha: str, workspace: Path = ROOT) -> None:
        self.github = {"event_name": event, "ref": ref, "sha": sha}
        self.workspace = workspace
        self.failed = False

    def value(self, name: str) -> str:
        scope, _, key = name.partition(".")
        if scope == "github" and key in self.github:
            return self.github[key]
        if scope == "secrets":
            return os.environ.get(f"NNBENCH_SECRET_{key}", "")
        raise ValueError(f"{name}: not a context this runner knows (github.event_name, github.ref, github.sha, "
                         "secrets.*)")

    def expand(self, text: str) -> str:
        """`${{ expr }}` in a value: a context name, or an expression evaluated as `if:` is."""
        return EXPR.sub(lambda m: str(self.evaluate(m.group(1))), text)

    def evaluate(self, expr: str):
        """A workflow expression, translated into Python over the few functions and operators the workflow uses."""
        out, i = [], 0
        token = re.compile(r"\s+|'(?:[^']|'')*'|&&|\|\||==|!=|!|\(|\)|,|[A-Za-z_][A-Za-z0-9_.\-]*")
        while i < len(expr):
            m = token.match(expr, i)
            if not m:
                raise ValueError(f"if: {expr!r}: cannot read it at {expr[i:]!r}")
            t = m.group(0)
            i = m.end()
            if t.isspace():
                continue
            if t.startswith("'"):
                out.append(repr(t[1:-1].replace("''", "'")))
            elif t in ("&&", "||", "!"):
                out.append({"&&": " and ", "||": " or ", "!": " not "}[t])
            elif t in ("==", "!=", "(", ")", ","):
                out.append(t)
            elif t in ("always", "success", "failure", "cancelled", "format", "hashFiles"):
                out.append(f"_{t}")
            elif t in ("true", "false"):
                out.append(t.capitalize())
            else:
                out.append(repr(self.value(t)))
        names = {"_always": lambda: True, "_success": lambda: not self.failed, "_failure": lambda: self.failed,
                 "_cancelled": lambda: False, "_format": _format,
                 "_hashFiles": lambda *patterns: _hash_files(self.workspace, *patterns)}
        return eval("".join(out), {"__builtins__": {}}, names)  # noqa: S307 (the translation admits only these)

    def decide(self, condition) -> bool:
        if condition is None:
            return not self.failed
        text = str(condition).strip()
        text = text[3:-2].strip() if text.startswith("${{") and text.endswith("}}") else text
        status_named = any(f in text for f in ("always()", "success()", "failure()", "cancelled()"))
        return bool(self.evaluate(text if status_named else f"success() && ({text})"))


def _format(pattern: str, *args) -> str:
    return re.sub(r"\{(\d+)\}", lambda m: str(args[int(m.group(1))]), pattern)


def _hash_files(workspace: Path, *patterns: str) -> str:
    """GitHub's hashFiles: '' where no file matches, else a digest (here: the matches' names, enough for != '')."""
    found = sorted(f for p in patterns for f in glob.glob(str(workspace / p), recursive=True) if Path(f).is_file())
    return "|".join(found)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--event", default="push", choices=["push", "pull_request", "workflow_dispatch"])
    ap.add_argument("--ref", default="refs/heads/main")
    ap.add_argument("--sha", default=os.environ.get("NNBENCH_GIT_SHA") or "")
    ap.add_argument("--replace", action="append", default=[], metavar="'STEP NAME=COMMANDS'")
    ap.add_argument("--skip", action="append", default=[], metavar="'STEP NAME'")
    ap.add_argument("--dry-run", action="store_true", help="decide every step's if: and run none")
    ap.add_argument("--workflow", type=Path, default=WORKFLOW)
    ap.add_argument("--workspace", type=Path, default=ROOT, help="where the steps run (GITHUB_WORKSPACE)")
    ap.add_argument("--tool-cache", type=Path, help="RUNNER_TOOL_CACHE (default OUT_DIR/tool-cache)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    job = next(iter(yaml.safe_load(a.workflow.read_text())["jobs"].values()))
    steps = job["steps"]
    names = {s.get("name") or s.get("uses") for s in steps}
    replace = dict(r.split("=", 1) for r in a.replace if "=" in r)
    for asked in [*replace, *a.skip]:
        if asked not in names:
            print(f"--replace/--skip {asked!r}: no such step; the steps are: {', '.join(sorted(map(str, names)))}",
                  file=sys.stderr)
            return 2
    sha = a.sha or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    ws = a.workspace.resolve()
    ctx = Context(a.event, a.ref, sha, ws)
    a.out.mkdir(parents=True, exist_ok=True)
    summary, github_env = a.out / "summary.md", a.out / "github_env"
    summary.touch()
    github_env.touch()
    summary, github_env = summary.resolve(), github_env.resolve()
    env = dict(os.environ, GITHUB_STEP_SUMMARY=str(summary), GITHUB_ENV=str(github_env), GITHUB_SHA=sha,
               GITHUB_WORKSPACE=str(ws), GITHUB_REF=a.ref, GITHUB_EVENT_NAME=a.event,
               RUNNER_TOOL_CACHE=str((a.tool_cache or a.out / "tool-cache").resolve()))
    env.update({k: ctx.expand(str(v)) for k, v in (job.get("env") or {}).items()})
    with open(a.out / "steps.jsonl", "w") as record:
        for n, step in enumerate(steps):
            name = step.get("name") or step.get("uses")
            line = {"step": n, "name": name}
            if not ctx.decide(step.get("if")):
                line["ran"] = "no: its if: is false"
            elif name in a.skip:
                line["ran"] = "no: --skip"
            elif "uses" in step:
                paths = str((step.get("with") or {}).get("path", "")).split()
                line["ran"] = f"no: uses {step['uses']} (not run here)"
                if "upload-artifact" in step["uses"]:
                    line["would_upload"] = sorted(str(Path(f).relative_to(ws)) for p in paths
                                                  for f in glob.glob(str(ws / p), recursive=True))
            elif not a.dry_run:
                step_env = dict(env, **{k: ctx.expand(str(v)) for k, v in (step.get("env") or {}).items()})
                for kv in github_env.read_text().splitlines():
                    if "=" in kv:
                        k, v = kv.split("=", 1)
                        step_env[k] = env[k] = v
                commands = replace.get(name, step["run"])
                t0 = time.perf_counter()
                with open(a.out / f"step-{n:02d}.log", "w") as log:
                    rc = subprocess.run([*SHELL, "-c", commands], cwd=ws, env=step_env, stdout=log,
                                        stderr=subprocess.STDOUT).returncode
                line.update(ran="yes (commands replaced)" if name in replace else "yes", rc=rc,
                            seconds=round(time.perf_counter() - t0, 1))
                ctx.failed |= rc != 0
            else:
                line["ran"] = "would run"
            record.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)
    return 1 if ctx.failed else 0


if __name__ == "__main__":
    sys.exit(main())
