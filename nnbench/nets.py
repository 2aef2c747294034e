"""The seed's character-recognition MLPs (Nets 1-8) as data, and the GEMMs that training them runs.

`configs/nets.yaml` holds the layer sizes; this module validates them and derives what other parts
need: neuron totals and multiply-add counts (checked against the seed in the tests), and the GEMM
shapes of one mini-batch training step, which the GEMM sweeps use as a named shape set.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from nnbench import paths
from nnbench.errors import NnbenchError
from nnbench.yamlnodes import compose, fail, integer, mapping, number, sequence, string

NETS_FILE = paths.CONFIGS / "nets.yaml"


SETTING_KEYS = ["init", "init_scale", "rate", "momentum", "max_iterations", "batch_rate"]
INITS = ["glorot", "centered"]  # nnbench.workloads.train.mlp.init_params says what each is


@dataclass(frozen=True)
class Net:
    name: str
    layers: tuple[int, ...]  # input width first, output width last
    settings: tuple[tuple[str, float | int | str], ...] = ()  # the settings that train it (nets.yaml)

    @property
    def neurons(self) -> int:
        return sum(self.layers)

    @property
    def feedforward_macs(self) -> int:
        """Multiply-adds of one feedforward: every neuron reads every neuron of the layer before."""
        return sum(a * b for a, b in zip(self.layers, self.layers[1:]))

    @property
    def widest_hidden(self) -> int:
        return max(self.layers[1:-1]) if len(self.layers) > 2 else 0

    def training_gemms(self, batch: int) -> list[tuple[str, int, int, int]]:
        """(role, M, N, K) of each GEMM of one mini-batch training step over `batch` samples, exactly
        as the trainer launches them (nnbench/workloads/train/batched.py), column-major, activations stored as
        (features x batch) with the bias folded in as a row of ones under each layer's inputs:
          forward          Y  (out x B)    = W   (out x in+1) . X  (in+1 x B)    M=out   N=B    K=in+1
          backward (data)  dX (in x B)     = W^T (in x out)   . dY (out x B)     M=in    N=B    K=out
          weight-gradient  dW^T (in+1 x out) = X (in+1 x B)   . dY^T (B x out)   M=in+1  N=out  K=B
        The first layer's input gradient is never needed, so it has no data-backward GEMM."""
        out = []
        for i, (n_in, n_out) in enumerate(zip(self.layers, self.layers[1:])):
            out.append(("forward", n_out, batch, n_in + 1))
            if i > 0:
                out.append(("backward-data", n_in, batch, n_out))
            out.append(("weight-gradient", n_in + 1, n_out, batch))
        return out


@lru_cache(maxsize=4)
def load(path: Path = NETS_FILE) -> dict[str, Net]:
    top = mapping(path, compose(path), "top level", ["nets", "settings"], required=("nets",))
    settings: dict[str, tuple] = {}
    if "settings" in top:
        for name, (_, body) in mapping(path, top["settings"][1], "settings").items():
            keys = mapping(path, body, f"settings.{name}", SETTING_KEYS)
            settings[str(name)] = tuple((k, _setting(path, k, v, f"settings.{name}.{k}")) for k, (_, v) in keys.items())
    nets = {}
    for name, (_, vnode) in mapping(path, top["nets"][1], "nets").items():
        layers = tuple(integer(path, n, f"nets.{name}", minimum=1) for n in sequence(path, vnode, f"nets.{name}"))
        if len(layers) < 2:
            raise fail(path, vnode, f"nets.{name}: a net needs at least an input and an output layer")
        nets[str(name)] = Net(str(name), layers, settings.get(str(name), ()))
    return nets


def _setting(path: Path, key: str, node, what: str):
    if key == "init":
        return string(path, node, what, INITS)
    if key == "max_iterations":
        return integer(path, node, what, minimum=1)
    return number(path, node, what, positive=key != "momentum")


def get(name: str | int) -> Net:
    nets = load()
    key = str(name)
    if key not in nets:
        raise NnbenchError(f"net {name}: unknown; choose from {', '.join(nets)} ({NETS_FILE.name})")
    return nets[key]
