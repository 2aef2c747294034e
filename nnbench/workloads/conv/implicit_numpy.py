"""Conv steps 9 and 10 on the CPU: the implicit GEMMs' operands gathered in NumPy with the kernels'
own index arithmetic (kernels_cu/conv/implicit_wgmma.cuh's PatchRows and load_filters, and
10_implicit_wgmma_backward.cu's FilterGather), padded to whole BM x BN x BK tiles with zeros where the
kernels' cp.async zero-fills, and multiplied k-block by k-block in float32. The CPU path of LeNet-5's
implicit variant (`lenet.cpu_step`), so CI checks the gathers' arithmetic, and that the one-step check
catches a dropped filter tap (`drop_tap`, as tests/mutants.py patches the kernels), without a GPU. Stride 1
(LeNet-5's layers); NCHW float32.
"""

from __future__ import annotations

import numpy as np

TILE = (128, 64, 32)  # BM, BN, BK: the registry's defaults for conv steps 9 and 10


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _gemm(a: np.ndarray, b: np.ndarray, bk: int) -> np.ndarray:
    """A (M x K) . B (K x N), K a whole number of k-blocks, summed k-block by k-block in float32 as the
    consumers' accumulators are."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], bk):
        acc += a[:, k0:k0 + bk] @ b[k0:k0 + bk]
    return acc


def _taps(kk: np.ndarray, taps: int, cols: int):
    """k -> (channel, tap row, tap column): PatchRows' decode of a k row."""
    c, t = kk // taps, kk % taps
    return c, t // cols, t % cols


def _patches(src: np.ndarray, m_rows: int, Ho: int, Wo: int, R: int, k_len: int, shift: int, dgrad: bool,
             drop_tap: bool, tile=TILE) -> np.ndarray:
    """PatchRows: A (M padded to BM, K padded to BK) of the forward (dgrad False: src[n, c, oh - shift + i,
    ow - shift + j]) or the data gradient (True: src[n, c, oh + shift - i, ow + shift - j]), zero outside
    the tensor, past the GEMM's K, and on rows past M."""
    bm, _, bk = tile
    N, C, Hi, Wi = src.shape
    m = np.arange(_up(m_rows, bm))[:, None]
    k = np.arange(_up(k_len, bk))[None, :]
    n, pix = m // (Ho * Wo), m % (Ho * Wo)
    oh, ow = pix // Wo, pix % Wo
    c, i, j = _taps(k, R * R, R)
    h, w = (oh + shift - i, ow + shift - j) if dgrad else (oh - shift + i, ow - shift + j)
    ok = (m < m_rows) & (k < k_len) & (h >= 0) & (h < Hi) & (w >= 0) & (w < Wi)
    if drop_tap:
        ok &= ~((i == R - 1) & (j == R - 1))
    flat = ((np.minimum(n, N - 1) * C + np.minimum(c, C - 1)) * Hi + np.clip(h, 0, Hi - 1)) * Wi + np.clip(w, 0, Wi - 1)
    return np.where(ok, src.reshape(-1)[flat], np.float32(0))


def _filters(w2: np.ndarray, tile=TILE) -> np.ndarray:
    """load_filters: B (K padded to BK, N padded to BN) from a (N, K) bank, zeros past either."""
    _, bn, bk = tile
    b = np.zeros((_up(w2.shape[1], bk), _up(w2.shape[0], bn)), np.float32)
    b[:w2.shape[1], :w2.shape[0]] = w2.T
    return b


def forward(x: np.ndarray, wt: np.ndarray, pad: int = 0, drop_tap: bool = False, tile=TILE) -> np.ndarray:
    """Conv step 9: Y (N, K, Ho, Wo) = conv(x, wt), stride 1."""
    N, C, H, W = x.shape
    K, _, R, _ = wt.shape
    Ho, Wo = H + 2 * pad - R + 1, W + 2 * pad - R + 1
    a = _patches(x, N * Ho * Wo, Ho, Wo, R, C * R * R, pad, False, drop_tap, tile)
    y = _gemm(a, _filters(wt.reshape(K, -1), tile), tile[2])[:N * Ho * Wo, :K]
    return np.ascontiguousarray(y.reshape(N, Ho, Wo, K).transpose(0, 3, 1, 2))


def data_grad(dy: np.ndarray, wt: np.ndarray, shape: tuple, pad: int = 0, drop_tap: bool = False,
              tile=TILE) -> np.ndarray:
    """Conv step 10's data gradient: dX (N, C, H, W), dY's patches (taps reversed) . the filters transposed."""
    N, C, H, W = shape
    K, _, R, _ = wt.shape
    a = _patches(dy, N * H * W, H, W, R, K * R * R, pad, True, drop_tap, tile)
    b = _filters(wt.transpose(1, 0, 2, 3).reshape(C, -1), tile)  # B(k, r, s ; c) = Wt[k, c, r, s]
    dx = _gemm(a, b, tile[2])[:N * H * W, :C]
    return np.ascontiguousarray(dx.reshape(N, H, W, C).transpose(0, 3, 1, 2))


def filter_grad(x: np.ndarray, dy: np.ndarray, R: int, pad: int = 0, drop_tap: bool = False,
                tile=TILE) -> np.ndarray:
    """Conv step 10's filter gradient: dW^T (C*R*R x K) = U . dY^T with K running image by image over each
    image's Ho*Wo pixels padded to whole k-blocks (FilterGather); returns dW (K, C, R, R)."""
    bm, _, bk = tile
    N, C, H, W = x.shape
    _, K, Ho, Wo = dy.shape
    hw, per = Ho * Wo, _up(Ho * Wo, bk)
    tap = np.arange(_up(C * R * R, bm))[:, None]
    c, r, s = _taps(tap, R * R, R)
    live = tap < C * R * R
    if drop_tap:
        live &= ~((r == R - 1) & (s == R - 1))
    pix = np.arange(per)[None, :]
    oh, ow = pix // Wo, pix % Wo
    h, w = oh - pad + r, ow - pad + s
    ok = live & (pix < hw) & (h >= 0) & (h < H) & (w >= 0) & (w < W)
    flat = (np.minimum(c, C - 1) * H + np.clip(h, 0, H - 1)) * W + np.clip(w, 0, W - 1)
    a = np.concatenate([np.where(ok, x[n].reshape(-1)[flat], np.float32(0)) for n in range(N)], axis=1)
    b = np.zeros((N * per, _up(K, tile[1])), np.float32)
    for n in range(N):
        b[n * per:n * per + hw, :K] = dy[n].reshape(K, hw).T
    dwt = _gemm(a, b, bk)[:C * R * R, :K]
    return np.ascontiguousarray(dwt.T.reshape(K, C, R, R))
