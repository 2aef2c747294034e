"""Memory estimated before it is allocated: a problem that cannot fit is refused with one line and
exit 2, instead of running for a minute and dying in an allocation traceback (or swapping the host).

Each workload says what one problem needs (`footprint`: host bytes, device bytes); this module knows
how much there is: MemAvailable for the host, the driver's free memory for the device. On the CPU
backend the "device" buffers are host arrays, so both figures count against host memory.
"""

from __future__ import annotations

import os

from nnbench.errors import NnbenchError

HEADROOM = 0.9  # leave a tenth for the interpreter, the libraries and everything else running


def host_available() -> int | None:
    """Bytes the kernel says can be allocated without swapping, or None where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def require(backend, host_bytes: float, device_bytes: float, what: str, smaller: str = "a smaller size") -> None:
    """Refuse `what` if its estimated host or device memory does not fit what is free now."""
    require_host(host_bytes + (device_bytes if not backend.runs_kernels else 0), what, smaller)
    if backend.runs_kernels:
        require_device(backend.free_memory(), device_bytes, what, smaller)


def require_device(free: int | None, device_bytes: float, what: str, smaller: str = "a smaller size") -> None:
    """Refuse `what` if its estimated device memory does not fit `free` (None: unknown, the buffers live in host
    memory)."""
    if free is not None and device_bytes > HEADROOM * free:
        raise NnbenchError(f"{what} needs about {size_text(device_bytes)} of GPU memory and {size_text(free)} is free; "
                           f"give {smaller}")


def largest(work, problems) -> tuple[object, float, float] | None:
    """(problem, host bytes, device bytes) of the problem that needs the most device memory (then host memory), or
    None where the workload estimates none of them: what a sweep's plan checks before any case runs."""
    sized = [(p, *need) for p in problems if (need := work.footprint(p)) is not None]
    return max(sized, key=lambda t: (t[2], t[1])) if sized else None


def require_host(on_host: float, what: str, smaller: str = "a smaller size") -> None:
    """Refuse `what` if its estimated host memory does not fit what is free now (a config is checked by this
    when it is loaded, before its backend is known: every problem, not only the first to run)."""
    have = host_available()
    if have is not None and on_host > HEADROOM * have:
        raise NnbenchError(f"{what} needs about {_gib(on_host)} of host memory and {_gib(have)} is available; "
                           f"give {smaller}")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def size_text(n: float) -> str:
    """GiB (MiB below one) to read, bytes to compare."""
    return f"{readable(n)} ({n:,.0f} bytes)"


def readable(n: float) -> str:
    return _gib(n) if n >= 2**30 else f"{n / 2**20:,.1f} MiB"
