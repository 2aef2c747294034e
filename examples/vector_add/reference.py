"""The float64 reference of vector_add.cu: every argument in order, the checked outputs returned."""

import numpy as np


def vector_add(a: np.ndarray, b: np.ndarray, c: np.ndarray, n: int) -> np.ndarray:
    return a + b
