"""nvcc to cubin, with a content-addressed cache on disk.

Kept free of PyCUDA on purpose: CI has nvcc but no GPU, and the compile tests must run this exact
code. A cubin is keyed by the kernel source plus every local header it includes, the -D parameters,
the flags, the target arch and the nvcc version, so editing a header or upgrading CUDA can never
serve a stale binary. ptxas's resource report (-v) is kept beside each cubin, so registers, shared
memory and spills are known even on a machine that cannot load the cubin.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from nnbench import paths, safeio
from nnbench.errors import CompileError, NnbenchError

BASE_FLAGS = ("-O3", "-std=c++17")
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


@dataclass(frozen=True)
class CompileRequest:
    source: Path
    params: tuple[tuple[str, int], ...]  # sorted (NAME, value): the -D macros
    arch: str  # "sm_90"
    includes: tuple[str, ...] = ()  # a user's own -I folders (a kernel config's `include:`), besides kernels_cu/

    @staticmethod
    def make(source: Path, params: dict[str, int], arch: str, includes: tuple[str, ...] = ()) -> CompileRequest:
        return CompileRequest(Path(source), tuple(sorted(params.items())), arch, tuple(includes))

    def label(self) -> str:
        ps = " ".join(f"{k}={v}" for k, v in self.params) or "(no parameters)"
        src = self.source.relative_to(paths.ROOT) if self.source.is_relative_to(paths.ROOT) else self.source
        return f"{src} [{ps}] for {self.arch}"


@dataclass
class PtxasReport:
    """What ptxas -v says about one kernel: the numbers that decide occupancy and spills."""

    registers: int = 0
    smem_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    # C7511: ptxas serialized the kernel's wgmma instructions (too few registers for their pipeline)
    wgmma_serialized: bool = False


@dataclass
class Compiled:
    request: CompileRequest
    cubin: Path
    key: str
    seconds: float  # nvcc wall time; 0 on a cache hit
    cached: bool
    ptxas: dict[str, PtxasReport] = field(default_factory=dict)  # per kernel name


@lru_cache(maxsize=1)
def nvcc_path() -> str:
    exe = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )
    if not exe:
        raise NnbenchError("nvcc not found on PATH: install the CUDA toolkit or add its bin/ folder to PATH")
    return exe


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release ([\d.]+), (V[\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1]


def _sources_closure(source: Path, includes: tuple[str, ...] = ()) -> list[Path]:
    """The file and every quoted #include it reaches, resolved like nvcc's -I kernels_cu and -I includes."""
    seen: list[Path] = []
    todo = [source.resolve()]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.append(f)
        for inc in _INCLUDE.findall(safeio.read_text(f, "CUDA source")):  # not UTF-8: one line, not a traceback
            for base in (f.parent, paths.KERNELS, *map(Path, includes)):
                cand = (base / inc).resolve()
                if cand.exists():
                    todo.append(cand)
                    break
    return seen


PLANT_VAR = "NNBENCH_PLANT"


def planted() -> tuple[tuple[str, int], ...]:
    """Defects planted on purpose, from NNBENCH_PLANT="NAME=INT,...": -D macros added to every compile
    (and to the cache key) so a test can prove that the gate catches what they do, e.g.
    PLANT_SLOWDOWN=1 (kernels_cu/common/plant.cuh). Never set outside such a test."""
    text = os.environ.get(PLANT_VAR, "").strip()
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, _, value = item.partition("=")
        if not re.fullmatch(r"PLANT_[A-Z0-9_]+", name) or not value.lstrip("-").isdigit():
            raise NnbenchError(f"{PLANT_VAR}={text!r}: expected PLANT_NAME=INTEGER[,...]")
        out.append((name, int(value)))
    return tuple(sorted(out))


def _hash_sources(h, source: Path, includes: tuple[str, ...] = ()) -> None:
    for f in _sources_closure(source, includes):
        h.update(f.name.encode())
        h.update(f.read_bytes())


def source_hash(source: Path, includes: tuple[str, ...] = ()) -> str:
    """The content hash of a kernel file and every header it reaches: what makes a timing of its kernels
    stale (the autotuner's cache key, nnbench/runtime/autotune.py), as it makes a cubin stale."""
    h = hashlib.sha256()
    _hash_sources(h, Path(source), includes)
    return h.hexdigest()[:32]


def cache_key(req: CompileRequest) -> str:
    h = hashlib.sha256()
    _hash_sources(h, req.source, req.includes)
    h.update(repr((req.params, req.arch, BASE_FLAGS, nvcc_version())).encode())
    if req.includes:
        h.update(repr(req.includes).encode())
    if planted():
        h.update(repr(planted()).encode())
    return h.hexdigest()[:32]


_PTXAS_FUNC = re.compile(r"Compiling entry function '(\w+)'")
_PTXAS_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_PTXAS_SERIALIZED = re.compile(r"\(C7511\).*wgmma.*function '(\w+)'")


def parse_ptxas(text: str) -> dict[str, PtxasReport]:
    """Parse `ptxas -v` output into a report per kernel (entry functions only)."""
    reports: dict[str, PtxasReport] = {}
    current: PtxasReport | None = None
    for line in text.splitlines():
        if m := _PTXAS_SERIALIZED.search(line):
            reports.setdefault(m.group(1), PtxasReport()).wgmma_serialized = True
        elif m := _PTXAS_FUNC.search(line):
            current = reports.setdefault(m.group(1), PtxasReport())
        elif current is not None and (m := _PTXAS_PROPS.search(line)):
            current.stack_bytes, current.spill_store_bytes, current.spill_load_bytes = map(int, m.groups())
        elif current is not None and (m := _PTXAS_USED.search(line)):
            current.registers = int(m.group(1))
            current.smem_bytes = int(m.group(2) or 0)
    return reports


def arch_flags(arch: str) -> list[str]:
    """nvcc's target flags. An architecture-specific target (sm_90a: wgmma, setmaxnreg) is named in
    the -gencode form: the -arch=sm_90a shorthand has been seen to add a plain sm_90 pass that
    rejects those instructions."""
    if arch.endswith("a"):
        return [f"-gencode=arch=compute_{arch[3:]},code={arch}"]
    return [f"-arch={arch}"]


_BUILDING: dict[Path, threading.Lock] = {}  # cache entry -> held while this process builds it
_BUILDING_GUARD = threading.Lock()


def compile_cubin(req: CompileRequest, cache: Path | None = None) -> Compiled:
    """Compile one (source, params, arch) into the cache, or return the cached cubin. Two threads asking for one
    kernel at once (a sweep's background compile: two cases, one tile set) run one nvcc; the second finds the
    first's cubin in the cache."""
    cache = cache or paths.cache_dir()
    key = cache_key(req)
    with _BUILDING_GUARD:
        building = _BUILDING.setdefault(cache / key, threading.Lock())
    with building:
        return _compile_cubin(req, cache, key)


def _compile_cubin(req: CompileRequest, cache: Path, key: str) -> Compiled:
    cubin = cache / f"{key}.cubin"
    meta = cache / f"{key}.json"
    if cubin.exists() and meta.exists():
        try:
            info = json.loads(meta.read_text())
            return Compiled(req, cubin, key, 0.0, True, {k: PtxasReport(**v) for k, v in info["ptxas"].items()})
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache entry is a miss: compiled again below, and replaced atomically

    cache.mkdir(parents=True, exist_ok=True)
    defines = [f"-D{k}={v}" for k, v in req.params + planted()]
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        out = Path(tmp) / "k.cubin"
        cmd = [nvcc_path(), "-cubin", *BASE_FLAGS, *arch_flags(req.arch), "-Xptxas", "-v",
               f"-I{paths.KERNELS}", *(f"-I{d}" for d in req.includes), *defines, "-o", str(out), str(req.source)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:300])
            raise CompileError(f"nvcc failed on {req.label()}: {first.strip()}")
        reports = parse_ptxas(proc.stderr)
        # Rename is atomic, so parallel compiles of the same key never expose a half-written cubin.
        tmp_meta = Path(tmp) / "k.json"
        tmp_meta.write_text(json.dumps({
            "source": str(req.source), "params": dict(req.params), "arch": req.arch,
            "nvcc": nvcc_version(), "seconds": seconds,
            "ptxas": {k: vars(v) for k, v in reports.items()},
        }))
        os.replace(out, cubin)
        os.replace(tmp_meta, meta)
    return Compiled(req, cubin, key, seconds, False, reports)


def usable_cache(cache: Path) -> None:
    """Refuse, in one line, a cache folder that cannot be made or written (NNBENCH_CACHE naming a
    file or a read-only folder), before any nvcc starts."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=cache):
            pass
    except OSError as e:
        raise NnbenchError(f"{cache}: the cubin cache (NNBENCH_CACHE) cannot be used: {e.strerror or e}") from None


def compile_many(reqs: list[CompileRequest], jobs: int | None = None, cache: Path | None = None,
                 return_errors: bool = False) -> list[Compiled | CompileError]:
    """Compile distinct requests in parallel, one nvcc process per core; order is preserved.

    With return_errors, a failed compile is returned in its place instead of raised, so one bad
    parameter set does not stop the others."""
    unique = list(dict.fromkeys(reqs))
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(unique) or 1))
    if unique:
        usable_cache(cache or paths.cache_dir())

    def one(req: CompileRequest) -> Compiled | CompileError:
        try:
            return compile_cubin(req, cache)
        except CompileError as e:
            if not return_errors:
                raise
            return e

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = dict(zip(unique, pool.map(one, unique)))
    return [done[r] for r in reqs]


def compile_sources(arch: str, kernels: list[tuple[str, dict[str, int]]], jobs: int | None = None
                    ) -> list[Compiled | CompileError]:
    """compile_many for (source under kernels_cu/, -D parameters) pairs, failures returned in place:
    how every workload compiles its variants."""
    reqs = [CompileRequest.make(paths.KERNELS / source, params, arch) for source, params in kernels]
    return compile_many(reqs, jobs=jobs, return_errors=True)


def variant_module(variant, params: dict[str, int], arch: str) -> Compiled:
    """A registry variant's module with other parameters than its case's (a tile the host or the autotuner
    picked for one shape), built for `arch` (or the variant's own target) or taken from the cache."""
    return compile_cubin(CompileRequest.make(paths.KERNELS / variant.source, params, variant.target(arch)))
