"""The element-function table: every function an element expression may apply, one row each.

A row holds what is true of the function whatever the target: its name (the IR's and the printed text's), arity,
whether it gives a value or a condition, its fp32 semantics on Python floats (constant folding), the torch
reference the tests compare against and the precision the device reaches against that reference (the docstring of
its `T.` spelling states it; a test checks they agree). The surface (language/elementwise.py) builds a `Call` of the
row's name, the printer prints `name(args)`, the lowering (passes/elementwise.py, LOWERINGS) keeps one instruction
sequence per row name, and tests/test_elemfn.py checks every row against torch on the emulated device for each arch.
Adding a function: docs/internals.md, "Adding an element function".

Nothing here imports torch: `reference` receives the torch module as its first argument.
"""
from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np

VALUE, CONDITION = "value", "condition"
# The domain a row computes in: ANY follows its operands (int operands give an int result, C's usual arithmetic
# conversions: any float operand makes it float), FLOAT converts int operands to fp32 (`/` and the math functions),
# INT takes integer operands only (bit operations, `//`, `%`).
ANY, FLOAT, INT = "any", "float", "int"

# Largest finite value of each element dtype (T.max_value; T.min_value is its negation).
MAX_FINITE = {"float32": float(np.finfo(np.float32).max), "float16": 65504.0,
              "bfloat16": struct.unpack("<f", struct.pack("<I", 0x7F7F0000))[0],
              "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "float8_e4m3fnuz": 240.0, "float8_e5m2fnuz": 57344.0,
              "int8": 127, "uint8": 255, "int16": 32767, "uint16": 65535, "int32": 2**31 - 1, "int64": 2**63 - 1}
MIN_INT = {"int8": -128, "uint8": 0, "int16": -32768, "uint16": 0, "int32": -2**31,
           "int64": -2**63}  # (T.min_value of ints)


@dataclass(frozen=True)
class ElemFn:
    name: str  # IR name, printed as name(args); also the T.<name> spelling where `operator` is None
    arity: int
    fold: Callable  # fp32 semantics on Python floats: the folded value (rounded to fp32 after) or a bool
    reference: Callable  # (torch, *tensors) -> tensor: what tests compare the device's result with
    precision: str  # against `reference`, over the sweep of tests/test_elemfn.py (edge values included)
    max_ulp: int  # the bound the precision states, in fp32 ulps from the correctly rounded result (tests check it)
    result: str = VALUE  # VALUE, or CONDITION (a comparison: only T.if_then_else consumes it)
    operator: str | None = None  # the Python operator that builds it (`a + b`), or None for a T. function
    operands: tuple = ()  # what each operand must be (VALUE / CONDITION); () means all values
    domain: str = ANY  # ANY, FLOAT or INT (above)

    @property
    def operand_kinds(self) -> tuple:
        return self.operands or (VALUE,) * self.arity

    @functools.cached_property
    def evaluation_order(self) -> tuple:
        """Operand positions in the order the lowering evaluates them: values first, then a condition, which lives
        in VCC, a register that value sequences (T.exp, T.max) overwrite."""
        return tuple(sorted(range(self.arity), key=lambda k: self.operand_kinds[k] == CONDITION))


def _f64(fn):
    """fn on numpy float64 with IEEE results for every input (inf, NaN) instead of exceptions or warnings."""
    def folded(*args):
        with np.errstate(all="ignore"):
            return float(fn(*(np.float64(a) for a in args)))
    return folded


def _nan_or(pick):
    """T.max / T.min folded: NaN when either operand is NaN, as torch.maximum / torch.minimum."""
    return lambda a, b: math.nan if math.isnan(a) or math.isnan(b) else pick(a, b)


def wrap32(x: int) -> int:
    """x as a 32-bit two's complement integer (the device's int arithmetic wraps)."""
    return (int(x) + 2**31) % 2**32 - 2**31


def _int_fold(fn):
    """An int row folded on Python ints, wrapped to int32 as the device computes it."""
    return lambda *args: wrap32(fn(*(int(a) for a in args)))


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        from ..errors import CompileError

        raise CompileError("integer division by zero in an element expression (`//` or `%` by a constant 0)")
    return a // b


def _f32_divide(a: float, b: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.float32(a) / np.float32(b))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _rsqrt(x):
    return np.copysign(np.inf, x) if x == 0 else 1.0 / np.sqrt(x)


EXACT = "exact (correctly rounded fp32, as torch)"
# Transcendentals: measured on the emulated device over tests/test_elemfn.py's sweep (0, -0, denormals, +-inf, NaN,
# 1e-45 .. 3e38 of both signs), where the hardware instructions are modelled within their 1 ulp (docs/isa-notes.md).
ROWS = (
    # -- arithmetic: Python operators on element expressions
    ElemFn("add", 2, lambda a, b: a + b, lambda t, a, b: a + b, EXACT, 0, operator="+"),
    ElemFn("sub", 2, lambda a, b: a - b, lambda t, a, b: a - b, EXACT, 0, operator="-"),
    ElemFn("mul", 2, lambda a, b: a * b, lambda t, a, b: a * b, EXACT, 0, operator="*"),
    ElemFn("div", 2, _f32_divide, lambda t, a, b: a / b, EXACT + "; IEEE x/0", 0, operator="/", domain=FLOAT),
    ElemFn("neg", 1, lambda a: -a, lambda t, a: -a, "exact (a sign flip: -(0.0) is -0.0)", 0, operator="-x"),
    # -- selection
    ElemFn("max", 2, _nan_or(max), lambda t, a, b: t.maximum(a, b), "exact; NaN if either operand is NaN", 0),
    ElemFn("min", 2, _nan_or(min), lambda t, a, b: t.minimum(a, b), "exact; NaN if either operand is NaN", 0),
    ElemFn("abs", 1, abs, lambda t, a: t.abs(a), "exact (clears the sign bit)", 0),
    # -- transcendental: the hardware instructions with LLVM's range reduction (passes/elementwise.py)
    ElemFn("exp", 1, _f64(np.exp), lambda t, a: t.exp(a), "max 1 ulp (denormal results included)", 1, domain=FLOAT),
    ElemFn("exp2", 1, _f64(np.exp2), lambda t, a: t.exp2(a), "max 1 ulp where x >= -126; below, 0 (no denormal "
           "results: T.exp keeps them)", 1, domain=FLOAT),
    ElemFn("log", 1, _f64(np.log), lambda t, a: t.log(a), "max 2 ulp (denormal inputs included); log(0) = -inf, "
           "log(x < 0) = NaN", 2, domain=FLOAT),
    ElemFn("log2", 1, _f64(np.log2), lambda t, a: t.log2(a), "max 1 ulp (denormal inputs included); log2(0) = "
           "-inf, log2(x < 0) = NaN", 1, domain=FLOAT),
    ElemFn("sqrt", 1, _f64(np.sqrt), lambda t, a: t.sqrt(a), EXACT + ", denormals included; sqrt(x < 0) = NaN", 0,
           domain=FLOAT),
    ElemFn("rsqrt", 1, _f64(_rsqrt), lambda t, a: t.rsqrt(a), "max 1 ulp (denormal inputs included); "
           "rsqrt(+-0) = +-inf", 1, domain=FLOAT),
    ElemFn("tanh", 1, _f64(np.tanh), lambda t, a: t.tanh(a), "max 2 ulp", 2, domain=FLOAT),
    ElemFn("sigmoid", 1, _f64(_sigmoid), lambda t, a: t.sigmoid(a), "max 3 ulp (denormal results included)", 3,
           domain=FLOAT),
    ElemFn("erf", 1, math.erf, lambda t, a: t.erf(a), "max 2 ulp; max abs error 1e-7", 2, domain=FLOAT),
    # -- integer operations (ints only; C's wrap-around at 32 bits; `//` and `%` round toward -inf as TVM's
    #    floordiv/floormod, which TileLang's `//` and `%` are, and as torch's and Python's)
    ElemFn("floordiv", 2, _int_fold(_floordiv), lambda t, a, b: t.div(a, b, rounding_mode="floor"),
           "exact (rounds toward -inf)", 0, operator="//", domain=INT),
    ElemFn("mod", 2, _int_fold(lambda a, b: a - _floordiv(a, b) * b), lambda t, a, b: t.remainder(a, b),
           "exact (the sign of the divisor)", 0, operator="%", domain=INT),
    ElemFn("bitand", 2, _int_fold(lambda a, b: a & b), lambda t, a, b: a & b, "exact", 0, operator="&", domain=INT),
    ElemFn("bitor", 2, _int_fold(lambda a, b: a | b), lambda t, a, b: a | b, "exact", 0, operator="|", domain=INT),
    ElemFn("bitxor", 2, _int_fold(lambda a, b: a ^ b), lambda t, a, b: a ^ b, "exact", 0, operator="^", domain=INT),
    ElemFn("shl", 2, _int_fold(lambda a, b: a << (b & 31)), lambda t, a, b: a << b,
           "exact (shift counts 0..31)", 0, operator="<<", domain=INT),
    ElemFn("shr", 2, _int_fold(lambda a, b: a >> (b & 31)), lambda t, a, b: a >> b,
           "exact (arithmetic: the sign fills; shift counts 0..31)", 0, operator=">>", domain=INT),
    ElemFn("bitnot", 1, _int_fold(lambda a: ~a), lambda t, a: ~a, "exact", 0, operator="~x", domain=INT),
    # -- comparisons: conditions for T.if_then_else (IEEE: false when either is NaN, except !=)
    ElemFn("lt", 2, lambda a, b: a < b, lambda t, a, b: a < b, "exact", 0, CONDITION, operator="<"),
    ElemFn("le", 2, lambda a, b: a <= b, lambda t, a, b: a <= b, "exact", 0, CONDITION, operator="<="),
    ElemFn("gt", 2, lambda a, b: a > b, lambda t, a, b: a > b, "exact", 0, CONDITION, operator=">"),
    ElemFn("ge", 2, lambda a, b: a >= b, lambda t, a, b: a >= b, "exact", 0, CONDITION, operator=">="),
    ElemFn("eq", 2, lambda a, b: a == b, lambda t, a, b: a == b, "exact", 0, CONDITION, operator="=="),
    ElemFn("ne", 2, lambda a, b: a != b, lambda t, a, b: a != b, "exact (true when either is NaN)", 0, CONDITION,
           operator="!="),
    ElemFn("and", 2, lambda a, b: a and b, lambda t, a, b: a & b, "exact", 0, CONDITION, operator="&",
           operands=(CONDITION, CONDITION)),
    ElemFn("or", 2, lambda a, b: a or b, lambda t, a, b: a | b, "exact", 0, CONDITION, operator="|",
           operands=(CONDITION, CONDITION)),
    ElemFn("not", 1, lambda a: not a, lambda t, a: ~a, "exact", 0, CONDITION, operator="~",
           operands=(CONDITION,)),
    ElemFn("if_then_else", 3, lambda c, a, b: a if c else b, lambda t, c, a, b: t.where(c, a, b), "exact", 0,
           operands=(CONDITION, VALUE, VALUE)),
)

ELEMENT_FUNCTIONS = {row.name: row for row in ROWS}


def fn(name: str) -> ElemFn:
    return ELEMENT_FUNCTIONS[name]


# torch's fp8 formats (a torch dtype of each name): exponent bits, mantissa bits, exponent bias, largest finite value,
# and what a cast gives past it (torch's .to(dtype), measured: e4m3fn saturates, +-inf included; e5m2 overflows to
# inf as IEEE; the fnuz formats, which have neither inf nor -0, give their one NaN). tests/test_dtypes.py checks the
# folding below and the device against torch over every code and a sweep of fp32 values.
FP8_FORMATS = {
    "float8_e4m3fn": (4, 3, 7, 448.0, "saturate"),
    "float8_e5m2": (5, 2, 15, 57344.0, "inf"),
    "float8_e4m3fnuz": (4, 3, 8, 240.0, "nan"),
    "float8_e5m2fnuz": (5, 2, 16, 57344.0, "nan"),
}
INT_RANGES = {"int8": (-2**7, 2**7), "uint8": (0, 2**8), "int16": (-2**15, 2**15), "uint16": (0, 2**16),
              "int32": (-2**31, 2**31), "int64": (-2**31, 2**31)}  # int64 elements hold int32 values (docs/dtypes.md)


def round_to_fp8(dtype_name: str, x: float) -> float:
    """x (rounded to fp32 first) cast to the fp8 format `dtype_name` as torch casts it: nearest even, then the
    format's overflow rule; a Python float."""
    _, mantissa_bits, bias, largest, overflow = FP8_FORMATS[dtype_name]
    x = float(np.float32(x))
    if math.isnan(x):
        return math.nan
    a = abs(x)
    if math.isinf(a):
        rounded = math.inf
    else:
        exponent = max(math.frexp(a)[1] - 1, 1 - bias) if a else 1 - bias
        quantum = 2.0 ** (exponent - mantissa_bits)
        rounded = round(a / quantum) * quantum  # round() on a float is half-to-even
    if rounded > largest:
        rounded = {"saturate": largest, "inf": math.inf, "nan": math.nan}[overflow]
    if rounded == 0 and dtype_name.endswith("fnuz"):
        return 0.0  # no -0: its code is the NaN
    return math.copysign(rounded, x)


def to_int(dtype_name: str, x) -> int:
    """x converted to the integer dtype as the device converts it: a float truncates toward zero (saturating to
    int32, NaN 0: v_cvt_i32_f32; in range this is torch's .to()), then wraps to the dtype's width as torch does."""
    if isinstance(x, float):
        x = 0 if math.isnan(x) else int(max(min(x, 2.0**31 - 1), -2.0**31))
    lo, hi = INT_RANGES[dtype_name]
    return (int(x) - lo) % (hi - lo) + lo


def convert_constant(dtype_name: str, x):
    """A number known while tracing converted to `dtype_name` (T.cast's rules): an int for integer dtypes, else a
    float rounded to the dtype."""
    if dtype_name in INT_RANGES:
        return to_int(dtype_name, x)
    if dtype_name in FP8_FORMATS:
        return round_to_fp8(dtype_name, float(x))
    return round_to(dtype_name, float(x))


def round_to(dtype_name: str, x: float) -> float:
    """x rounded to nearest even in `dtype_name` (float32, float16, bfloat16), as a Python float; past the range
    +-inf (IEEE overflow), never an exception."""
    with np.errstate(all="ignore"):
        if dtype_name == "float16":
            return float(np.float16(np.float32(x)))
        f32 = np.float32(x)
        if dtype_name != "bfloat16" or math.isnan(f32):
            return float(f32)
    bits = struct.unpack("<I", struct.pack("<f", f32))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even on the upper 16 bits
    return struct.unpack("<f", struct.pack("<I", bits))[0]
