"""A small, safe arithmetic language for constraints, launch geometry and sweep restrictions.

`ts % wpt == 0`, `cdiv(M, TS)`, `TS * TS / WPT <= 1024`: parsed with `ast` and evaluated by walking
the tree against a whitelist. There is no `eval`, no attribute access, no subscripts, and names are
limited to the ones the caller passes in plus a handful of functions.
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


class ExprError(NnbenchError):
    pass


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {text!r}: {e.msg}") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.BinOp, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Name,
                               ast.Load, ast.Constant, ast.Call, ast.Tuple, ast.IfExp, ast.And, ast.Or,
                               *_BIN, *_CMP, *_UNARY))
        if not ok:
            raise ExprError(f"expression {text!r} uses {type(node).__name__}, which is not allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ExprError(f"expression {text!r}: only numbers are allowed as constants")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExprError(f"expression {text!r} calls {name}(); allowed: {', '.join(sorted(FUNCTIONS))}")
    return tree


def names(text: str) -> set[str]:
    """The variable names an expression reads (function names excluded)."""
    funcs = {n.func.id for n in ast.walk(parse(text)) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(parse(text)) if isinstance(n, ast.Name)} - funcs


def evaluate(text: str, env: dict[str, float]):
    return _eval(parse(text).body, env, text)


def _eval(node: ast.AST, env: dict, text: str):
    match node:
        case ast.Constant(value=v):
            return v
        case ast.Name(id=name):
            if name not in env:
                raise ExprError(f"expression {text!r} uses unknown name {name!r}; known: {', '.join(sorted(env))}")
            return env[name]
        case ast.BinOp(left=l, op=op, right=r):
            a, b = _eval(l, env, text), _eval(r, env, text)
            if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
                raise ExprError(f"expression {text!r} divides by zero")
            if isinstance(op, ast.Pow) and abs(b) > 64:
                raise ExprError(f"expression {text!r}: exponent too large")
            return _BIN[type(op)](a, b)
        case ast.UnaryOp(op=op, operand=x):
            return _UNARY[type(op)](_eval(x, env, text))
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
            return FUNCTIONS[f](*(_eval(a, env, text) for a in args))
    raise ExprError(f"expression {text!r}: unsupported construct")  # unreachable after parse()
