"""The MLP's training math, once, for a batch of any size in any float dtype (float64: the reference
that every version is checked against; float32: the NumPy versions' arithmetic). Per-sample training,
as the seed trains, is this math at a batch of one:
  forward   o_l = sigmoid(W_l o_(l-1) + b_l), the bias stored as the last column of W_l
  deltas    d_L = o_L (1 - o_L)(t - o_L);  d_l = o_l (1 - o_l) * (W_(l+1)^T d_(l+1)), old weights
  update    v = momentum * v + rate * (1/B) sum_b d_l,b o_(l-1),b^T;   W += v
and the reported error is the mean over samples of E = 1/2 sum (t - o)^2.
nnbench/workloads/train/mlp.py and batched.py train with it (mlp.py's derivation notes the seed's typos).
"""

from __future__ import annotations

import numpy as np


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def deltas(params: list[np.ndarray], outs: list[np.ndarray], e: np.ndarray) -> list[np.ndarray]:
    """Every layer's deltas from the outputs `outs` of a forward pass and the output error e = t - o,
    for one sample (vectors) or a batch (samples as rows): d_L = o(1-o)e, d_l = h(1-h)(W_(l+1)^T d)."""
    o = outs[-1]
    out = [o * (1 - o) * e]
    for l in range(len(params) - 1, 0, -1):
        h = outs[l]
        out.append(h * (1 - h) * (out[-1] @ params[l][:, :-1]))  # d @ W == W^T d, row by row for a batch
    out.reverse()
    return out


def forward(params: list[np.ndarray], X: np.ndarray) -> list[np.ndarray]:
    """Outputs of every layer for the batch X (samples as rows)."""
    outs = [X]
    for W in params:
        outs.append(sigmoid(outs[-1] @ W[:, :-1].T + W[:, -1]))
    return outs


def gradient_sums(params: list[np.ndarray], X: np.ndarray, T: np.ndarray,
                  ready=None) -> tuple[list[np.ndarray], float]:
    """The batch's summed update directions d o^T (bias column last) and its summed E, before any
    update: what each data-parallel rank computes on its part of a batch before the allreduce.
    The gradients are made from the last layer down, and `ready(l, g)` is told of each as it exists
    (a data-parallel rank starts a bucket's allreduce there)."""
    outs = forward(params, X)
    e = T - outs[-1]
    ds = deltas(params, outs, e)
    grads: list[np.ndarray] = [np.empty(0)] * len(ds)
    for l in range(len(ds) - 1, -1, -1):
        grads[l] = np.hstack([ds[l].T @ outs[l], ds[l].sum(axis=0)[:, None]])
        if ready is not None:
            ready(l, grads[l])
    return grads, 0.5 * float(np.sum(e * e))


def apply_update(params: list[np.ndarray], vel: list[np.ndarray], grads: list[np.ndarray], scale, momentum) -> None:
    """v = momentum v + scale g; W += v, in place (scale = rate / the global batch)."""
    for W, v, g in zip(params, vel, grads):
        v *= momentum
        v += scale * g
        W += v


def step(params: list[np.ndarray], vel: list[np.ndarray], X: np.ndarray, T: np.ndarray, rate, momentum) -> float:
    """One mini-batch step, in place; returns the batch's mean E before the update."""
    grads, e = gradient_sums(params, X, T)
    apply_update(params, vel, grads, rate / len(X), momentum)
    return e / len(X)


def reference_weights(init, data, batch: int, hyper, steps: int) -> list[np.ndarray]:
    """The float64 weights after `steps` steps of `batch` samples of `data` (a glyphs.Dataset) from
    `init`, at hyper's rate and momentum: the reference that every version's check compares with."""
    ref = [W.copy() for W in init]
    vel = [np.zeros_like(W) for W in init]
    for j in range(steps):
        sl = _batch(j, batch, len(data))
        step(ref, vel, data.x[sl], data.t[sl], hyper.rate, hyper.momentum)
    return ref


def _batch(j: int, batch: int, samples: int):
    """Batch j's samples: the next `batch` of the training set, from its start again past its end."""
    first = j * batch
    return slice(first, first + batch) if first + batch <= samples else np.arange(first, first + batch) % samples
