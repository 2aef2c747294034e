"""YAML configs into validated cases, with file:line in every error.

YAML is composed (safe: `yaml.compose` builds plain nodes, never objects) so each value keeps the
line it came from; a bad key, type or value is reported as `file:line: key: problem; allowed: ...`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from nnbench import registry
from nnbench.errors import NnbenchError
from nnbench.suites.gemm import Case, Shape


class ConfigError(NnbenchError):
    pass


def _where(path: Path, node: yaml.Node) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def compose(path: Path) -> yaml.Node:
    try:
        node = yaml.compose(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if node is None:
        raise ConfigError(f"{path}: the file is empty")
    return node


def mapping(path: Path, node: yaml.Node, what: str, allowed: list[str] | None = None) -> dict[str, tuple]:
    """A mapping node as {key: (key_node, value_node)}, rejecting unknown keys."""
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{_where(path, node)}: {what}: expected a mapping")
    out = {}
    for k, v in node.value:
        if allowed is not None and k.value not in allowed:
            raise ConfigError(f"{_where(path, k)}: {what}: unknown key {k.value!r}; allowed: {', '.join(allowed)}")
        out[k.value] = (k, v)
    return out


def sequence(path: Path, node: yaml.Node, what: str) -> list[yaml.Node]:
    if not isinstance(node, yaml.SequenceNode):
        raise ConfigError(f"{_where(path, node)}: {what}: expected a list")
    return node.value


def integer(path: Path, node: yaml.Node, what: str, minimum: int | None = None) -> int:
    if not (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":int")):
        raise ConfigError(f"{_where(path, node)}: {what}: expected an integer, got {node.value!r}")
    v = int(node.value, 0)
    if minimum is not None and v < minimum:
        raise ConfigError(f"{_where(path, node)}: {what}: {v} is below the minimum {minimum}")
    return v


@dataclass
class GemmConfig:
    cases: list[Case]
    sizes: list[Shape]


def load_gemm(path: Path) -> GemmConfig:
    """configs/gemm.yaml: parameter sets per variant, and sizes [M, N, K]."""
    path = Path(path)
    top = mapping(path, compose(path), "top level", ["variants", "sizes"])
    cases: list[Case] = []
    if "variants" in top:
        names = [v.name for v in registry.suite_variants("gemm", "cuda")]
        for name, (knode, vnode) in mapping(path, top["variants"][1], "variants", names).items():
            v = registry.get("gemm", name)
            for item in sequence(path, vnode, f"variants.{name}"):
                pnames = [p.name for p in v.params]
                params = v.defaults()
                for pname, (pk, pv) in mapping(path, item, f"variants.{name}", pnames).items():
                    params[pname] = integer(path, pv, f"variants.{name}.{pname}")
                problems = v.problems(params)
                if problems:
                    raise ConfigError(f"{_where(path, item)}: variants.{name}: {problems[0]}")
                cases.append(Case(v, tuple(params.items())))
    sizes: list[Shape] = []
    for item in sequence(path, top["sizes"][1], "sizes") if "sizes" in top else []:
        dims = sequence(path, item, "sizes")
        if len(dims) != 3:
            raise ConfigError(f"{_where(path, item)}: sizes: expected [M, N, K], got {len(dims)} values")
        sizes.append(Shape(*(integer(path, d, "sizes", minimum=1) for d in dims)))
    return GemmConfig(cases, sizes)
