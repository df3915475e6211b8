"""The element functions of the `T.` surface: math, comparisons' selection, casts and dtype limits.

Each function builds a `Call` of its row in ir/elemfn.py (the one table of element functions); the precision each
docstring states is that row's `precision` (tests/test_elemfn.py checks they agree and that the device meets it).
"""
from __future__ import annotations

import numbers

import sympy

from ..errors import ArgumentError, CompileError
from ..ir import elemfn
from ..ir import nodes as N
from ..ir.types import as_dtype
from .builtins import _roles
from .proxies import IndexProxy, ScalarProxy


def max(a, b):  # noqa: A001 - the T. namespace mirrors TileLang
    """The larger of two values, elementwise inside `T.Parallel` (ReLU: `T.max(x, 0.0)`); NaN when either is NaN,
    as torch.maximum.

    Precision against torch: exact; NaN if either operand is NaN.

    Example:

    ```python
    x[i, j] = T.max(x[i, j], 0.0)
    ```
    """
    index = _index_pair(a, b)
    if index is not None:  # outside T.Parallel, on indices: an index (a device loop bound, a tile start)
        return IndexProxy(sympy.Max(*index), _roles(a) + _roles(b))
    return N.apply("max", a, b)


def min(a, b):  # noqa: A001
    """The smaller of two values, elementwise inside `T.Parallel`; NaN when either is NaN, as torch.minimum.

    Precision against torch: exact; NaN if either operand is NaN.

    Example:

    ```python
    x[i, j] = T.min(x[i, j], 6.0)
    ```
    """
    index = _index_pair(a, b)
    if index is not None:  # outside T.Parallel, on indices: an index (a device loop bound, a tile start)
        return IndexProxy(sympy.Min(*index), _roles(a) + _roles(b))
    return N.apply("min", a, b)


def _index_pair(a, b):
    """(a, b) as SymPy integers when neither is an element value and one is a device index (outside T.Parallel),
    else None."""
    from .proxies import _device_index
    from .tracer import current

    if current().parallel is not None or not any(isinstance(x, (IndexProxy, ScalarProxy)) for x in (a, b)):
        return None
    pair = (_device_index(a), _device_index(b))
    return None if None in pair else pair


def clamp(dst, min_val, max_val):
    """`dst` limited to [min_val, max_val]: `T.min(T.max(dst, min_val), max_val)`, as TileLang defines it
    (argument names included); NaN stays NaN.

    Precision against torch (torch.clamp): exact.

    Example:

    ```python
    x[i, j] = T.clamp(x[i, j], -6.0, 6.0)
    ```
    """
    return N.apply("min", N.apply("max", dst, min_val), max_val)


def abs(x):  # noqa: A001
    """|x|, elementwise inside `T.Parallel`.

    Precision against torch: exact (clears the sign bit).

    Example:

    ```python
    x[i, j] = T.abs(x[i, j])
    ```
    """
    return N.apply("abs", x)


def exp(x):
    """e ** x, elementwise inside `T.Parallel` (LLVM's expansion of llvm.exp.f32 around v_exp_f32).

    Precision against torch: max 1 ulp (denormal results included).

    Example:

    ```python
    x[i, j] = T.exp(x[i, j] - 1.0)
    ```
    """
    return N.apply("exp", x)


def exp2(x):
    """2 ** x, elementwise inside `T.Parallel`: one v_exp_f32 (softmax's exponential).

    Precision against torch: max 1 ulp where x >= -126; below, 0 (no denormal results: T.exp keeps them).

    Example:

    ```python
    x[i, j] = T.exp2(x[i, j] * 1.4426950408889634)
    ```
    """
    return N.apply("exp2", x)


def log(x):
    """The natural logarithm, elementwise inside `T.Parallel` (LLVM's expansion of llvm.log.f32 around
    v_log_f32).

    Precision against torch: max 2 ulp (denormal inputs included); log(0) = -inf, log(x < 0) = NaN.

    Example:

    ```python
    x[i, j] = T.log(x[i, j])
    ```
    """
    return N.apply("log", x)


def log2(x):
    """The base-2 logarithm, elementwise inside `T.Parallel` (v_log_f32, with LLVM's scaling of denormal inputs).

    Precision against torch: max 1 ulp (denormal inputs included); log2(0) = -inf, log2(x < 0) = NaN.

    Example:

    ```python
    x[i, j] = T.log2(x[i, j])
    ```
    """
    return N.apply("log2", x)


def sqrt(x):
    """The square root, elementwise inside `T.Parallel` (v_sqrt_f32 corrected to the nearest fp32, as LLVM expands
    llvm.sqrt.f32).

    Precision against torch: exact (correctly rounded fp32, as torch), denormals included; sqrt(x < 0) = NaN.

    Example:

    ```python
    x[i, j] = T.sqrt(x[i, j])
    ```
    """
    return N.apply("sqrt", x)


def rsqrt(x):
    """1 / sqrt(x), elementwise inside `T.Parallel` (v_rsq_f32, with LLVM's scaling of denormal inputs).

    Precision against torch: max 1 ulp (denormal inputs included); rsqrt(+-0) = +-inf.

    Example:

    ```python
    x[i, j] = x[i, j] * T.rsqrt(sum_sq[i] / N + eps)
    ```
    """
    return N.apply("rsqrt", x)


def tanh(x):
    """The hyperbolic tangent, elementwise inside `T.Parallel` (an odd polynomial near 0, 1 - 2 / (e^2|x| + 1)
    elsewhere; the sign of x).

    Precision against torch: max 2 ulp.

    Example:

    ```python
    x[i, j] = T.tanh(x[i, j])
    ```
    """
    return N.apply("tanh", x)


def sigmoid(x):
    """1 / (1 + e ** -x), elementwise inside `T.Parallel` (T.exp, then a correctly rounded division).

    Precision against torch: max 3 ulp (denormal results included).

    Example:

    ```python
    x[i, j] = x[i, j] * T.sigmoid(x[i, j])  # SiLU
    ```
    """
    return N.apply("sigmoid", x)


def erf(x):
    """The error function, elementwise inside `T.Parallel` (x P(x^2) for |x| < 1, 1 - t Q(t) e^(-x^2) beyond, with
    fitted polynomials P and Q).

    Precision against torch: max 2 ulp; max abs error 1e-7.

    Example:

    ```python
    x[i, j] = 0.5 * x[i, j] * (1.0 + T.erf(x[i, j] * 0.7071067811865476))  # exact GELU
    ```
    """
    return N.apply("erf", x)


def if_then_else(cond, t, f):
    """`t` where `cond` holds, else `f`, elementwise inside `T.Parallel`. `cond` compares element values, indices,
    block ids, loop variables or runtime scalars (`<`, `<=`, `>`, `>=`, `==`, `!=`; IEEE: false when an operand is
    NaN, except `!=`; indices compare exactly below 2^24); conditions combine with `&`, `|` and `~` (Python's `and`,
    `or`, `not` would ask for a truth value while tracing: refused). Both values are computed, then one is picked
    per element (v_cmp + v_cndmask): no branch.

    Precision against torch: exact (as torch.where).

    Example:

    ```python
    x[i, j] = T.if_then_else(x[i, j] > 0.0, x[i, j], 0.01 * x[i, j])  # leaky ReLU
    s[i, j] = T.if_then_else(by * block_M + i >= k * block_N + j, s[i, j], -T.infinity("float32"))  # causal
    ```
    """
    if isinstance(cond, bool):  # a comparison Python decided while tracing (of compile-time numbers)
        return N.lift(t if cond else f)
    return N.apply("if_then_else", cond, t, f)


def cast(x, dtype):
    """`x` converted to `dtype` (`"float32"`, `"bfloat16"`, `"int8"`, `"float8_e4m3fn"` or T.float16, ...) as torch's
    `.to(dtype)` converts, elementwise inside `T.Parallel`: a float rounds to nearest even (fp8 overflow as torch:
    docs/dtypes.md), a float to an int truncates toward zero and wraps to the width, an int to a narrower int wraps.
    The result is computed on in fp32 for float dtypes, in 32-bit ints for int dtypes. On a number known while
    tracing, the converted number.

    Precision against torch (x.to(dtype)): exact.

    Example:

    ```python
    x[i, j] = T.cast(x[i, j], "bfloat16")  # round to bf16
    idx[i, j] = T.cast(x[i, j] * 16.0, "int32")  # truncates toward zero
    ```
    """
    dtype = program_dtype(dtype)
    if not isinstance(x, N.Expr) and getattr(type(x), "__element_expr__", None) is None:
        value = x if isinstance(x, numbers.Integral) and not isinstance(x, bool) else \
            _number(x, f"T.cast(x, {dtype.name})")
        return elemfn.convert_constant(dtype.name, value)
    return N.Cast(dtype, N.lift(x))


def Cast(dtype, x):  # noqa: N802 - TileLang's spelling
    """`T.cast(x, dtype)` with TileLang's other argument order: `T.Cast(accum_dtype, eps)`.

    Example:

    ```python
    x[i, j] = x[i, j] * T.rsqrt(sq[i] / N + T.Cast("float32", 1e-6))
    ```
    """
    return cast(x, dtype)


def infinity(dtype):
    """+inf in `dtype`, a number known while tracing (`-T.infinity(accum_dtype)` starts a running max).

    Example:

    ```python
    T.fill(row_max, -T.infinity("float32"))
    ```
    """
    if program_dtype(dtype).is_int:
        raise CompileError(f"T.infinity({program_dtype(dtype).name}): an int dtype has no infinity; use "
                           f"T.max_value({program_dtype(dtype).name!r}) / T.min_value(...)")
    return float("inf")


def max_value(dtype):
    """The largest finite value of `dtype` (3.4028235e38 for float32, 65504 for float16, 448 for float8_e4m3fn, 127
    for int8), a number known while tracing.

    Example:

    ```python
    x[i, j] = T.min(x[i, j], T.max_value("float16"))  # saturate before a cast to fp16
    ```
    """
    return elemfn.MAX_FINITE[program_dtype(dtype).name]


def min_value(dtype):
    """The lowest finite value of `dtype` (`-T.max_value(dtype)` for floats; -128 for int8, 0 for uint8), a number
    known while tracing.

    Example:

    ```python
    T.fill(row_max, T.min_value("float32"))
    ```
    """
    dt = program_dtype(dtype)
    return elemfn.MIN_INT[dt.name] if dt.is_int else -elemfn.MAX_FINITE[dt.name]


def program_dtype(dtype):
    """as_dtype for a dtype written in the tile program: a bad one is a CompileError at the user's line."""
    try:
        return as_dtype(dtype)
    except ArgumentError as e:
        raise CompileError(e.raw_message) from None


def _number(x, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise CompileError(f"{what}: cannot use {x!r} ({type(x).__name__}) as an element value")
    return float(x)
