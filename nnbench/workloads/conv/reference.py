"""The convolution's float64 references: im2col (tested against a direct loop), the forward as a
float64 matrix product, both gradients, and pooling forward and backward."""

from __future__ import annotations

import numpy as np


# -- the reference --------------------------------------------------------------------------------
def im2col(x: np.ndarray, R: int, stride: int, pad: int) -> np.ndarray:
    """(N, C, H, W) -> (N, C*R*R, Ho*Wo): row c*R*R + p*R + q, column h*Wo + w (the unroll kernel's
    layout), zero padding outside the image."""
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (R, R), axis=(2, 3))[:, :, ::stride, ::stride][:, :, :Ho, :Wo]
    return win.transpose(0, 1, 4, 5, 2, 3).reshape(N, C * R * R, Ho * Wo)


def im2col_loop(x: np.ndarray, R: int, stride: int, pad: int) -> np.ndarray:
    """The same matrix by the seed's loops, element by element (the test of `im2col`)."""
    N, C, H, W = x.shape
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    u = np.zeros((N, C * R * R, Ho * Wo), dtype=x.dtype)
    for n in range(N):
        for c in range(C):
            for p in range(R):
                for q in range(R):
                    for h in range(Ho):
                        for w in range(Wo):
                            hh, ww = h * stride - pad + p, w * stride - pad + q
                            if 0 <= hh < H and 0 <= ww < W:
                                u[n, (c * R + p) * R + q, h * Wo + w] = x[n, c, hh, ww]
    return u


def conv_reference(x: np.ndarray, wt: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """float64 y = conv(x, wt): for each image, Wt (K x C*R*R) times its unrolled input."""
    N, _, H, W = x.shape
    K, C, R, _ = wt.shape
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    u = im2col(x.astype(np.float64), R, stride, pad)
    # a BLAS product per image (np.matmul broadcasts over N): np.einsum without `optimize` runs its own
    # unblocked loop, 27x slower at the ResNet layer (the gate's conv part spent seconds here per run)
    return np.matmul(wt.reshape(K, C * R * R).astype(np.float64), u).reshape(N, K, Ho, Wo)


def col2im(u: np.ndarray, shape: tuple[int, int, int, int], R: int, stride: int, pad: int) -> np.ndarray:
    """The adjoint of `im2col`: (N, C*R*R, Ho*Wo) -> (N, C, H, W), every column's entries added
    back where they came from (what the data gradient of the unroll path needs)."""
    N, C, H, W = shape
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    xp = np.zeros((N, C, H + 2 * pad, W + 2 * pad), dtype=u.dtype)
    cols = u.reshape(N, C, R, R, Ho, Wo)
    for p in range(R):
        for q in range(R):
            xp[:, :, p:p + stride * Ho:stride, q:q + stride * Wo:stride] += cols[:, :, p, q]
    return np.ascontiguousarray(xp[:, :, pad:pad + H, pad:pad + W])  # NCHW in memory, as uploads expect


def conv_backward_reference(x: np.ndarray, wt: np.ndarray, dy: np.ndarray, stride: int, pad: int):
    """float64 (dx, dw) of y = conv(x, wt) for the output gradient dy."""
    N = x.shape[0]
    K, C, R, _ = wt.shape
    u = im2col(x.astype(np.float64), R, stride, pad)
    dy2 = dy.astype(np.float64).reshape(N, K, -1)
    dw = np.tensordot(dy2, u, axes=([0, 2], [0, 2])).reshape(wt.shape)  # BLAS, as conv_reference
    du = np.matmul(wt.reshape(K, -1).astype(np.float64).T, dy2)
    return col2im(du, x.shape, R, stride, pad), dw


def pool_backward_reference(x: np.ndarray, dy: np.ndarray, S: int, mode: str) -> np.ndarray:
    """dx of pooling: avg spreads dy/(S*S) over the window; max sends dy to the window's first
    maximum (row-major order, as the kernel and PyTorch pick it); cut-off rows and columns get 0."""
    N, C, H, W = x.shape
    Ho, Wo = H // S, W // S
    dx = np.zeros((N, C, H, W))
    if mode == "avg":
        dx[:, :, :Ho * S, :Wo * S] = np.repeat(np.repeat(dy.astype(np.float64), S, axis=2), S, axis=3) / (S * S)
        return dx
    win = x[:, :, :Ho * S, :Wo * S].reshape(N, C, Ho, S, Wo, S).transpose(0, 1, 2, 4, 3, 5).reshape(N, C, Ho, Wo, -1)
    arg = win.argmax(axis=-1)
    n, c, h, w = np.indices((N, C, Ho, Wo))
    dx[n, c, h * S + arg // S, w * S + arg % S] = dy
    return dx


def pool_reference(x: np.ndarray, S: int, mode: str) -> np.ndarray:
    N, C, H, W = x.shape
    Ho, Wo = H // S, W // S
    win = x[:, :, :Ho * S, :Wo * S].astype(np.float64).reshape(N, C, Ho, S, Wo, S)
    return win.max(axis=(3, 5)) if mode == "max" else win.mean(axis=(3, 5))


def random_nonzero(rng: np.random.Generator, shape) -> np.ndarray:
    """Uniform in +-[0.25, 1]: no zeros, so an input a kernel skips changes the result."""
    m = rng.uniform(0.25, 1.0, size=shape)
    return (m * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)
