"""A small, safe arithmetic language for constraints, launch geometry and sweep restrictions.

`ts % wpt == 0`, `cdiv(M, TS)`, `TS * TS / WPT <= 1024`: parsed with `ast` and evaluated by walking
the tree against a whitelist. There is no `eval`, no attribute access, no subscripts, and names are
limited to the ones the caller passes in plus a handful of functions.

It is also bounded, because a sweep config is input like any other: an expression is at most
MAX_CHARS characters, MAX_NODES nodes and MAX_DEPTH levels deep; every value it computes stays
within +-MAX_MAGNITUDE (a power is refused before it is computed if its result would not); and
an arithmetic error (log2(0), a division by zero, min() of nothing, a tuple compared with a
number) is an ExprError, one line, never a Python exception.
"""

from __future__ import annotations

import ast
import math
import operator
from functools import lru_cache

from nnbench.errors import NnbenchError

FUNCTIONS = {
    "cdiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
    "abs": abs,
    "log2": math.log2,
    "is_pow2": lambda x: x > 0 and (int(x) & (int(x) - 1)) == 0,
}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}


MAX_CHARS = 2000
MAX_NODES = 500
MAX_DEPTH = 40
MAX_MAGNITUDE = 2**63  # well past any size or parameter a kernel takes; no huge integers are ever built
CONDITIONS = (ast.Compare, ast.BoolOp)


class ExprError(NnbenchError):
    pass


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.Expression:
    if len(text) > MAX_CHARS:
        raise ExprError(f"expression {_short(text)} has {len(text):,} characters; at most {MAX_CHARS:,} are allowed")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {_short(text)}: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"expression {_short(text)} is nested too deeply (at most {MAX_DEPTH} levels)") from None
    _check_size(tree, text)
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.BinOp, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Name,
                               ast.Load, ast.Constant, ast.Call, ast.Tuple, ast.IfExp, ast.And, ast.Or,
                               *_BIN, *_CMP, *_UNARY))
        if not ok:
            raise ExprError(f"expression {_short(text)} uses {type(node).__name__}, which is not allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ExprError(f"expression {_short(text)}: only numbers are allowed as constants")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExprError(f"expression {_short(text)} calls {name}(); allowed: {', '.join(sorted(FUNCTIONS))}")
    return tree


def _check_size(tree: ast.AST, text: str) -> None:
    nodes, stack = 0, [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise ExprError(f"expression {_short(text)} is nested more than {MAX_DEPTH} levels deep")
        if nodes > MAX_NODES:
            raise ExprError(f"expression {_short(text)} has more than {MAX_NODES} terms; write it shorter")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _short(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text):,} characters)"


def check_condition(text: str) -> None:
    """Refuse an expression that is not a condition (`ts + 1`, `5`): as a restriction it would
    be taken as true or false by its value, which is never what was meant."""
    body = parse(text).body
    if isinstance(body, CONDITIONS) or (isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.Not)) or \
            (isinstance(body, ast.Call) and body.func.id == "is_pow2"):
        return
    raise ExprError(f"{_short(text)} is not a condition; write a comparison such as ts % wpt == 0 or "
                    "ts * ts / wpt <= 1024 (or is_pow2(...), and, or, not)")


def names(text: str) -> set[str]:
    """The variable names an expression reads (function names excluded)."""
    funcs = {n.func.id for n in ast.walk(parse(text)) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(parse(text)) if isinstance(n, ast.Name)} - funcs


def evaluate(text: str, env: dict[str, float]):
    try:
        return _eval(parse(text).body, env, text)
    except (ArithmeticError, ValueError, TypeError) as e:
        raise ExprError(f"expression {_short(text)} at {_point(env)}: {_arith_why(e)}") from None


def _point(env: dict) -> str:
    shown = {k: v for k, v in env.items() if not (k.lower() == k and k.upper() in env and k != k.upper())}
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "no names"


def evaluate_whole(text: str, env: dict[str, float]) -> int:
    """An expression that counts something (a size, bytes, a launch dimension): a whole number, never truncated, so
    `N / 3` at N = 100 is refused rather than taken as 33."""
    v = evaluate(text, env)
    return whole(v, text, env)


def whole(v, text: str, env: dict) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not v.is_integer()):
        raise ExprError(f"expression {_short(text)} is {v!r} at {_point(env)}; expected a whole number")
    return int(v)


def _arith_why(e: Exception) -> str:
    text = str(e)
    if "math domain error" in text:
        return "log2 of a number <= 0"
    if isinstance(e, ZeroDivisionError):
        return "division by zero"
    if isinstance(e, OverflowError):
        return f"a value beyond +-2**{MAX_MAGNITUDE.bit_length() - 1}"
    if isinstance(e, TypeError) and ("tuple" in text or "iterable" in text or "expected" in text):
        return f"a list (a, b) used as a number, or a function given the wrong arguments ({text})"
    return text


def _bounded(v, text: str):
    if isinstance(v, complex):  # (N - 5000) ** 0.5 below N = 5000
        raise ExprError(f"expression {_short(text)}: a complex number (a fractional power of a negative number)")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and (abs(v) > MAX_MAGNITUDE or v != v):
        raise ExprError(f"expression {_short(text)}: a value beyond +-2**{MAX_MAGNITUDE.bit_length() - 1}")
    return v


def _eval(node: ast.AST, env: dict, text: str):
    match node:
        case ast.Constant(value=v):
            return v
        case ast.Name(id=name):
            if name not in env:
                raise ExprError(f"expression {_short(text)} uses unknown name {name!r}; "
                                f"known: {', '.join(sorted(env))}")
            return env[name]
        case ast.BinOp(left=l, op=op, right=r):
            a, b = _eval(l, env, text), _eval(r, env, text)
            if isinstance(a, tuple) or isinstance(b, tuple):  # (1,) * 2**30 would build the tuple first
                raise ExprError(f"expression {_short(text)}: arithmetic on a list (a, b); a list is only a launch's "
                                "(x, y, z) or a function's arguments")
            if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and not isinstance(b, tuple) and b == 0:
                raise ExprError(f"expression {_short(text)} divides by zero")
            if isinstance(op, ast.Pow) and not isinstance(a, tuple) and not isinstance(b, tuple):
                if abs(b) > 64:
                    raise ExprError(f"expression {_short(text)}: exponent {b} is too large (at most 64)")
                if b > 0 and abs(a) > 1 and math.log2(abs(a)) * b > MAX_MAGNITUDE.bit_length():
                    raise ExprError(f"expression {_short(text)}: {a} ** {b} is beyond "
                                    f"+-2**{MAX_MAGNITUDE.bit_length() - 1}")
            return _bounded(_BIN[type(op)](a, b), text)
        case ast.UnaryOp(op=op, operand=x):
            v = _eval(x, env, text)
            if isinstance(v, tuple) and not isinstance(op, ast.Not):
                raise ExprError(f"expression {_short(text)}: arithmetic on a list (a, b)")
            return _bounded(_UNARY[type(op)](v), text)
        case ast.Compare(left=l, ops=ops, comparators=rs):
            a = _eval(l, env, text)
            for op, r in zip(ops, rs):
                b = _eval(r, env, text)
                if not _CMP[type(op)](a, b):
                    return False
                a = b
            return True
        case ast.BoolOp(op=ast.And(), values=vs):
            return all(_eval(v, env, text) for v in vs)
        case ast.BoolOp(op=ast.Or(), values=vs):
            return any(_eval(v, env, text) for v in vs)
        case ast.IfExp(test=t, body=b, orelse=o):
            return _eval(b, env, text) if _eval(t, env, text) else _eval(o, env, text)
        case ast.Tuple(elts=es):
            return tuple(_eval(e, env, text) for e in es)
        case ast.Call(func=ast.Name(id=f), args=args):
            return _bounded(FUNCTIONS[f](*(_eval(a, env, text) for a in args)), text)
    raise ExprError(f"expression {_short(text)}: unsupported construct")  # unreachable after parse()
