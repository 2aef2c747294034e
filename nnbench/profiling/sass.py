"""The instruction mix of a kernel's hot loop, from its SASS (`cuobjdump --dump-sass` on the cubin).

The seed lecture argues from the inner loop's code: in the tiled GEMM only one instruction in three
is useful (an FFMA beside two shared loads), and coarsening makes it 8 FMAs for 8+1 loads. This
module finds that loop in the SASS and counts it, so the argument can be checked for any kernel.

The hot loop is the innermost backward branch's body (a loop that contains no other loop) with the
most math instructions (FFMA, and HMMA or HGMMA for tensor-core steps). Both spellings of a branch target
are read: an address (`BRA 0x1a0`) and a label (`BRA \\`(.L_x_3)` with `.L_x_3:` lines).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nnbench.errors import NnbenchError

_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+|\.L_\w+):")
_TARGET = re.compile(r"`\((\.L_\w+)\)|\b0x([0-9a-f]+)\b")

# Categories, in the order tables show them. An opcode's category is its first match.
CATEGORIES = (
    ("FFMA", ("FFMA",)),                      # fp32 fused multiply-add: the useful work of an FFMA GEMM
    ("HMMA", ("HMMA",)),                      # tensor-core MMA, one warp (mma.sync: step 8)
    ("HGMMA", ("HGMMA",)),                    # tensor-core MMA, one warpgroup, asynchronous (wgmma: step 9)
    ("other FP", ("FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "MUFU", "F2F")),
    ("LDS", ("LDS", "LDSM")),                 # shared-memory loads
    ("STS", ("STS",)),
    ("LDG", ("LDG",)),                        # global loads
    ("STG", ("STG",)),
    ("integer/address", ("IMAD", "IADD", "LEA", "SHF", "LOP", "ISETP", "IMNMX", "SEL", "MOV", "IABS", "PRMT",
                         "UIADD", "UMOV", "ULEA", "USHF", "ULOP", "UISETP", "UIMAD", "S2R", "S2UR", "CS2R", "R2UR")),
    ("async/sync", ("UTMALDG", "LDGSTS", "SYNCS", "ARRIVES", "WARPGROUP", "USETMAXREG")),  # Hopper's pipeline
    ("control", ("BRA", "BAR", "EXIT", "BSYNC", "BSSY", "WARPSYNC", "NOP", "RET", "CALL", "YIELD", "DEPBAR")),
)
MATH = ("FFMA", "HMMA", "HGMMA")


@dataclass
class Instruction:
    offset: int
    opcode: str  # without predicate, e.g. "FFMA" or "LDS.128"
    text: str

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]


@dataclass
class Function:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # label -> offset of the next instruction

    def loops(self) -> list[tuple[int, int]]:
        """(first, last) instruction offsets of every loop: a branch back to an earlier offset."""
        out = []
        for ins in self.instructions:
            if ins.base != "BRA":
                continue
            target = branch_target(ins.text, self.labels)
            # A branch to itself is the trap every sm_90 kernel ends with after EXIT, not a loop.
            if target is not None and target < ins.offset:
                out.append((target, ins.offset))
        return out

    def hot_loop(self) -> tuple[int, int] | None:
        """The innermost loop with the most math instructions; None for straight-line code."""
        loops = self.loops()
        inner = [lp for lp in loops if not any(o != lp and lp[0] <= o[0] and o[1] <= lp[1] for o in loops)]
        best, best_math = None, -1
        for lo, hi in inner:
            math = sum(1 for i in self.instructions if lo <= i.offset <= hi and i.base in MATH)
            if math > best_math:
                best, best_math = (lo, hi), math
        return best

    def body(self, span: tuple[int, int] | None) -> list[Instruction]:
        if span is None:
            return list(self.instructions)
        return [i for i in self.instructions if span[0] <= i.offset <= span[1]]


def branch_target(text: str, labels: dict[str, int]) -> int | None:
    after = text.split("BRA", 1)[1] if "BRA" in text else ""
    m = _TARGET.search(after)
    if not m:
        return None
    return labels.get(m.group(1)) if m.group(1) else int(m.group(2), 16)


def parse(text: str) -> dict[str, Function]:
    """cuobjdump --dump-sass text -> the functions in it, by name."""
    funcs: dict[str, Function] = {}
    cur: Function | None = None
    pending: list[str] = []
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), Function(m.group(1)))
            pending = []
            continue
        if cur is None:
            continue
        lm = _LABEL.match(line)
        if lm:
            pending.append(lm.group(1))
            continue
        im = _INSTR.match(line)
        if im:
            offset, body = int(im.group(1), 16), im.group(2).strip()
            words = body.split()
            if words and words[0].startswith("@"):  # a predicate guard, e.g. @!P0
                words = words[1:]
            if not words:
                continue
            for lab in pending:
                cur.labels[lab] = offset
            pending = []
            cur.instructions.append(Instruction(offset, words[0], body))
    return funcs


def mix(instructions: list[Instruction]) -> dict[str, int]:
    """Instructions per category (CATEGORIES order), plus 'rest' and 'total'."""
    counts: Counter = Counter()
    for ins in instructions:
        for cat, prefixes in CATEGORIES:
            if ins.base in prefixes:
                counts[cat] += 1
                break
        else:
            counts["rest"] += 1
    out = {cat: counts.get(cat, 0) for cat, _ in CATEGORIES}
    out["rest"] = counts.get("rest", 0)
    out["total"] = len(instructions)
    return out


def useful_fraction(m: dict[str, int]) -> float:
    """The seed's measure: math instructions over all instructions of the loop."""
    return sum(m[c] for c in MATH) / m["total"] if m["total"] else 0.0


# Where NVIDIA's PyPI wheels put the tools (`pip install -e '.[profile]'`): nvidia/cu13/bin/ for CUDA 13,
# nvidia/cuda_cuobjdump/bin/ and nvidia/cuda_nvdisasm/bin/ for CUDA 12. Outside PATH, so looked up here.
WHEEL_DIRS = ("nvidia/cu*/bin", "nvidia/cuda_*/bin")
NOT_FOUND = "cuobjdump not found (on PATH or from `pip install -e '.[profile]'`)"


def find_tool(name: str) -> str | None:
    """`name` on PATH (the CUDA toolkit's), else the copy a pip wheel installed into site-packages."""
    found = shutil.which(name)
    if found:
        return found
    for base in dict.fromkeys(Path(p) for p in sys.path if p):
        for pattern in WHEEL_DIRS:
            for d in sorted(base.glob(pattern)):
                tool = d / name
                if tool.is_file() and os.access(tool, os.X_OK):
                    return str(tool)
    return None


def cuobjdump() -> str | None:
    return find_tool("cuobjdump")


def dump(cubin: Path) -> str:
    tool = cuobjdump()
    if tool is None:
        raise NnbenchError(f"{NOT_FOUND}: the instruction mix needs it")
    # cuobjdump runs nvdisasm for --dump-sass: put the wheel's (or the toolkit's) beside it on PATH.
    dirs = [str(Path(t).parent) for t in (tool, find_tool("nvdisasm")) if t]
    env = dict(os.environ, PATH=os.pathsep.join([*dirs, os.environ.get("PATH", "")]))
    out = subprocess.run([tool, "--dump-sass", str(cubin)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise NnbenchError(f"cuobjdump failed on {cubin.name}: {out.stderr.strip()[:200]}")
    return out.stdout
