"""The float64 reference of tiled_gemm.cu.

The arrays arrive as NumPy arrays in the config's shapes: a column-major M x K matrix is a C-order
(K, M) array, so A @ B in column-major terms is B @ A here, and the result is C's (N, M)."""

import numpy as np


def gemm(M: int, N: int, K: int, alpha: float, A: np.ndarray, B: np.ndarray, beta: float, C: np.ndarray):
    out = alpha * (B @ A)
    return out if beta == 0 else out + beta * C
