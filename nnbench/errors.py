"""One error family for everything a user can get wrong.

The CLI turns any NnbenchError into one line on stderr and exit code 2, so each message must name
the option (or YAML key, file and line) and the allowed values on its own.
"""


class NnbenchError(Exception):
    """A user error: bad option, bad config, missing backend. Exit code 2, no traceback."""


class CompileError(NnbenchError):
    """nvcc rejected a kernel; the message names the file and the parameter set."""


class BackendUnavailable(NnbenchError):
    """The requested backend (PyCUDA, a GPU, cuBLAS) is not present on this machine."""


class KernelFault(Exception):
    """A kernel crashed (illegal address, launch failure). Not a user error: the case is recorded as
    failed, and what was measured before it is kept."""


class QueueFull(Exception):
    """A batch queued behind the blocking kernel filled the driver's queue (nnbench/runtime/cuda.py): its samples
    are void, and the backend's queue_room for that launch is now smaller. `measure` fits its batches to it."""
