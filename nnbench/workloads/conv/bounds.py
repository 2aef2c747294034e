"""The convolution's error measure and limits (docs/VERIFICATION.md derives them): each output's error against
the magnitudes that enter it, as for GEMM, with the reduction lengths of the convolution.

Every output of a forward convolution is a sum of C*R*S products (its taps), with no epilogue; the magnitude
of an output is the same convolution on |x| and |w|. A data gradient sums at most K*R*S products (fewer
with a stride), on |dy| and |w|; a filter gradient N*P*Q products, on |x| and |dy|. An average pool sums
S*S terms and scales once; a max pool and its gradient route values without arithmetic and must be exact
(what the measure asks of an output whose magnitude is 0, and of a limit of one rounding on values that
take none)."""

from __future__ import annotations

import numpy as np

from nnbench import measure
from nnbench.runtime.device import FFMA
from nnbench.workloads.conv.problem import ConvShape
from nnbench.workloads.conv.reference import (
    conv_backward_reference,
    conv_reference,
    pool_backward_reference,
    pool_reference,
)


def forward_terms(s: ConvShape) -> int:
    return s.C * s.R * s.R


def data_grad_terms(s: ConvShape) -> int:
    # an input element meets at most ceil(R / stride)^2 taps of each of the K filters
    return s.K * (-(-s.R // s.stride)) ** 2


def filter_grad_terms(s: ConvShape) -> int:
    return s.N * s.Ho * s.Wo


def forward_limit(precision: str | None, s: ConvShape) -> float:
    return measure.error_limit(precision, forward_terms(s), epilogue=0)


def backward_limits(precision: str | None, s: ConvShape) -> tuple[float, float]:
    """(dX's limit, dW's limit)."""
    return (measure.error_limit(precision, data_grad_terms(s), epilogue=0),
            measure.error_limit(precision, filter_grad_terms(s), epilogue=0))


def forward_magnitude(x: np.ndarray, wt: np.ndarray, stride: int, pad: int) -> np.ndarray:
    return conv_reference(np.abs(x), np.abs(wt), stride, pad)


def backward_magnitudes(x: np.ndarray, wt: np.ndarray, dy: np.ndarray, stride: int, pad: int):
    """(dX's, dW's) magnitudes: both gradients on |x|, |w| and |dy|."""
    return conv_backward_reference(np.abs(x), np.abs(wt), np.abs(dy), stride, pad)


def worst(pairs) -> tuple[float, float]:
    """Of (error, limit) pairs, the one nearest failing (the largest error / limit): the row's rel_err and rtol."""
    return max(pairs, key=lambda p: p[0] / p[1] if p[1] > 0 else (np.inf if p[0] > 0 else 0.0))


def pool_magnitude(x: np.ndarray, S: int, mode: str) -> np.ndarray:
    return pool_reference(np.abs(x), S, mode)


def pool_backward_magnitude(x: np.ndarray, dy: np.ndarray, S: int, mode: str) -> np.ndarray:
    return np.abs(pool_backward_reference(x, np.abs(dy), S, mode))


def pool_limit(mode: str, S: int) -> float:
    """An average: S*S terms summed and one scaling, in FP32; a maximum (and any gradient's routing) is exact,
    and one rounding of slack stays below any error a wrong element makes."""
    return measure.error_limit(FFMA, S * S if mode == "avg" else 1, epilogue=1)
