"""Reading YAML with the line of every value kept, so each error can say `file:line: key: problem`.

YAML is composed, not constructed: `yaml.compose` builds plain nodes (safe: it never makes
objects), and each node knows where it starts. Callers walk the nodes with the helpers below, which
reject a wrong type, an unknown key or an out-of-range value with the allowed values in the message.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from nnbench import safeio
from nnbench.errors import NnbenchError


class ConfigError(NnbenchError):
    pass


def where(path: Path, node: yaml.Node) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def fail(path: Path, node: yaml.Node, message: str) -> ConfigError:
    return ConfigError(f"{where(path, node)}: {message}")


def compose(path: Path) -> yaml.Node:
    try:
        node = yaml.compose(safeio.read_text(path, "config file"))
    except NnbenchError as e:
        raise ConfigError(str(e)) from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a config") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        if isinstance(e, yaml.reader.ReaderError):  # a character YAML forbids (NUL, a control byte)
            why = f"character {e.character!r} at offset {e.position} is not allowed"
        else:
            why = " ".join(str(getattr(e, "problem", None) or e).split())  # one line, whatever PyYAML wrote
        raise ConfigError(f"{path}{line}: not valid YAML: {why}") from None
    if node is None:
        raise ConfigError(f"{path}: the file is empty")
    _no_tags(path, node)
    return node


# The tags a plain YAML value resolves to. Any other (!!python/object, !!binary, !local) is an instruction to a
# constructor, which a config never needs: refused, so no reader quietly takes `!!python/... x` for the text `x`.
PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map",
                                                       "timestamp", "merge")}


def _no_tags(path: Path, root: yaml.Node) -> None:
    seen, todo = set(), [(root, "top level")]
    while todo:  # iterative, and each node once: an alias bomb is visited as the few nodes it is
        node, key = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag not in PLAIN_TAGS:
            raise fail(path, node, f"{key}: the tag {node.tag!r} is not allowed; a config is plain YAML data "
                                   "(text, numbers, true/false, lists, mappings)")
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    raise fail(path, k, f"{key}: a key must be a name, not {_shown(k)}")
                todo += [(k, key), (v, k.value)]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(v, key) for v in node.value]


def mapping(path: Path, node: yaml.Node, what: str, allowed: list[str] | None = None,
            required: tuple[str, ...] = ()) -> dict[str, tuple]:
    """A mapping node as {key: (key_node, value_node)}, rejecting unknown and missing keys."""
    if not isinstance(node, yaml.MappingNode):
        raise fail(path, node, f"{what}: expected a mapping")
    out = {}
    for k, v in node.value:
        if allowed is not None and k.value not in allowed:
            raise fail(path, k, f"{what}: unknown key {k.value!r}; allowed: {', '.join(allowed)}")
        if k.value in out:
            raise fail(path, k, f"{what}: key {k.value!r} appears twice")
        out[k.value] = (k, v)
    for key in required:
        if key not in out:
            raise fail(path, node, f"{what}: missing key {key!r}")
    return out


# A config key's older name, read as today's (`renamed`): `suite:` named the workload before the word was one.
OLD_KEYS = {"suite": "workload"}


def renamed(path: Path, node: yaml.Node, what: str, old: dict[str, str] = OLD_KEYS) -> yaml.Node:
    """`node` with each older key name given today's, in place, so a config written before a rename loads as one
    written after; both names given is one line naming the key."""
    if isinstance(node, yaml.MappingNode):
        keys = {k.value for k, _ in node.value}
        for k, _ in node.value:
            if k.value in old:
                if old[k.value] in keys:
                    raise fail(path, k, f"{what}: {k.value} is the old name of {old[k.value]}; give one of them")
                k.value = old[k.value]
    return node


def sequence(path: Path, node: yaml.Node, what: str) -> list[yaml.Node]:
    if not isinstance(node, yaml.SequenceNode):
        raise fail(path, node, f"{what}: expected a list")
    return node.value


def scalar(path: Path, node: yaml.Node, what: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise fail(path, node, f"{what}: expected a single value")
    return node.value


def integer(path: Path, node: yaml.Node, what: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if not (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":int")):
        raise fail(path, node, f"{what}: expected an integer, got {_shown(node)}")
    if ":" in node.value:  # YAML 1.1's base 60 (1:30 is 90): never what a config means
        raise fail(path, node, f"{what}: expected an integer, got {_shown(node)}")
    try:
        v = int(node.value, 0)
    except ValueError:  # YAML 1.1 spellings Python does not read (017 octal, 1:30 base 60), or 5,000 digits
        try:
            v = yaml.safe_load(node.value)
        except (yaml.YAMLError, ValueError):
            v = None
        if not isinstance(v, int):
            raise fail(path, node, f"{what}: expected an integer, got {_shown(node)}") from None
    if minimum is not None and v < minimum:
        raise fail(path, node, f"{what}: {v} is below the minimum {minimum}")
    if maximum is not None and v > maximum:
        raise fail(path, node, f"{what}: {v} is above the maximum {maximum}")
    return v


def number(path: Path, node: yaml.Node, what: str, positive: bool = False) -> float:
    # PyYAML reads `5e-5` (no dot) as a string, so plain scalars that parse as numbers count too.
    try:
        if not isinstance(node, yaml.ScalarNode) or node.tag.endswith(":bool") or node.style:
            raise ValueError
        v = float(node.value)
    except ValueError:
        raise fail(path, node, f"{what}: expected a number, got {_shown(node)}") from None
    if not math.isfinite(v):
        raise fail(path, node, f"{what}: {node.value} is not a finite number")
    if positive and not v > 0:
        raise fail(path, node, f"{what}: {node.value} must be > 0")
    return v


def boolean(path: Path, node: yaml.Node, what: str) -> bool:
    if not (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":bool")):
        raise fail(path, node, f"{what}: expected true or false, got {_shown(node)}")
    return bool(yaml.safe_load(node.value))


def string(path: Path, node: yaml.Node, what: str, choices: list[str] | None = None) -> str:
    if not (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":str")):
        raise fail(path, node, f"{what}: expected a name, got {_shown(node)}")
    if choices is not None and node.value not in choices:
        raise fail(path, node, f"{what}: {node.value!r} is not one of {', '.join(choices)}")
    return node.value


def _shown(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        return repr(node.value)
    return "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
