import numpy as np


def fma_chain(x: np.ndarray, y: np.ndarray, n: int, iters: int = 4096) -> np.ndarray:
    # acc_{k+1} = 0.999 acc_k + a, acc_0 = 0: a (1 - 0.999^k) / 0.001
    return x * (1 - 0.999 ** iters) / (1 - 0.999)
