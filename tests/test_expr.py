import pytest

from nnbench import expr


def test_arithmetic_and_rules():
    env = {"TS": 32, "WPT": 8, "M": 1000}
    assert expr.evaluate("TS % WPT == 0", env) is True
    assert expr.evaluate("TS * TS / WPT <= 1024", env) is True
    assert expr.evaluate("cdiv(M, TS)", env) == 32
    assert expr.evaluate("(TS, TS // WPT)", env) == (32, 4)
    assert expr.evaluate("1 < TS < 64 and not WPT > 8", env) is True
    assert expr.evaluate("is_pow2(TS) and not is_pow2(M)", env) is True
    assert expr.names("cdiv(M, TS) + WPT") == {"M", "TS", "WPT"}


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')",
    "TS.__class__",
    "[TS]",
    "TS[0]",
    "open('x')",
    "'abc'",
    "lambda: 1",
])
def test_rejects_anything_but_arithmetic(text):
    with pytest.raises(expr.ExprError):
        expr.evaluate(text, {"TS": 32})


def test_unknown_name_and_division_by_zero():
    with pytest.raises(expr.ExprError, match="unknown name 'wpt'"):
        expr.evaluate("ts % wpt == 0", {"ts": 32})
    with pytest.raises(expr.ExprError, match="divides by zero"):
        expr.evaluate("ts % wpt", {"ts": 32, "wpt": 0})
    with pytest.raises(expr.ExprError, match="cannot parse"):
        expr.evaluate("ts %% 2", {"ts": 1})


@pytest.mark.parametrize("text, needle", [
    ("(1,) * 2**30", "arithmetic on a list"),  # built 8 GiB before the error
    ("(R,) * 10**7 == (R,) * 10**7", "arithmetic on a list"),  # a restriction: 150 s over 4,096 points
    ("(1, 2) + (3,)", "arithmetic on a list"),
    ("-(1, 2)", "arithmetic on a list"),
    ("(R - 5000) ** 0.5", "a complex number"),  # a flops or rtol that later became a traceback
])
def test_lists_are_not_numbers_and_nothing_unbounded_is_built(text, needle):
    import time
    t0 = time.perf_counter()
    with pytest.raises(expr.ExprError, match=needle):
        expr.evaluate(text, {"R": 3})
    assert time.perf_counter() - t0 < 0.5
