"""Host code for the GEMM ladder's kernels where other workloads borrow them (the convolution's
unroll path runs step 8's 3xTF32 kernel on its unrolled input): the launch signature every ladder
kernel shares and one bound launch. The registry says the geometry; this module knows only the call."""

from __future__ import annotations

import numpy as np

SIGNATURE = "iiifPPfP"  # M, N, K, alpha, A, B, beta, C: every ladder kernel, column-major


def bind_gemm(backend, variant, params: dict, kernel, M: int, N: int, K: int, alpha: float, a, b, beta: float, c):
    """A no-argument launch of `kernel` (a ladder step's `gemm`) for C = alpha*A*B + beta*C."""
    grid = variant.launch_grid(params, {"M": M, "N": N, "K": K})
    return backend.bind(kernel, grid, variant.launch_block(params),
                        (np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), np.intp(int(a)),
                         np.intp(int(b)), np.float32(beta), np.intp(int(c))), SIGNATURE)
