"""Scalar dtypes and the specialisation description of a tensor argument.

The IR imports no torch (tilegcn/ir is the compiler's data, usable without it): a DType's `name` is also the
name of its torch dtype (`getattr(torch, dtype.name)` where a torch dtype is needed), and torch dtypes and
tensors are read by duck typing here.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

from ..errors import ArgumentError


FLOAT, INT, UINT = "float", "int", "uint"


@dataclass(frozen=True)
class DType:
    name: str  # "float32", "float16", "bfloat16", "int8", "float8_e4m3fn", ...: torch's name for it too
    short: str  # "f32", "f16", "bf16", "i8" (MFMA / asm suffix)
    bytes: int
    kind: str = FLOAT  # FLOAT, INT (signed) or UINT

    def __repr__(self):
        return self.name

    @property
    def is_16bit(self) -> bool:
        """A 16-bit float (float16, bfloat16): fragments hold two per register (int16 elements take one each)."""
        return self.bytes == 2 and self.kind == FLOAT

    @property
    def is_float(self) -> bool:
        return self.kind == FLOAT

    @property
    def is_int(self) -> bool:
        """A signed or unsigned integer: its element values are evaluated as 32-bit integers (the C promotion)."""
        return self.kind != FLOAT

    @property
    def is_fp8(self) -> bool:
        return self.kind == FLOAT and self.bytes == 1 and not self.is_packed_fp4

    @property
    def is_packed_fp4(self) -> bool:
        """float4_e2m1fn_x2: two fp4 (e2m1) values a byte, the even element in the low nibble (torch's dtype of
        that name, OCP MX); only T.gemm reads them (gfx950's f8f6f4 MFMAs), global and shared tiles hold them."""
        return self.name == "float4_e2m1fn_x2"

    def __call__(self, value):
        """`T.float32(1.0)`, `T.float16(x[i, j])`, as TileLang writes constants and casts: a number rounded to this
        dtype (a number known while tracing), or an element expression cast to it (T.cast)."""
        from . import elemfn, nodes

        if isinstance(value, nodes.Expr) or getattr(type(value), "__element_expr__", None) is not None:
            return nodes.Cast(self, nodes.lift(value))
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            from ..errors import CompileError

            raise CompileError(f"T.{self.name}({value!r}): expected a number or an element expression, got "
                               f"{type(value).__name__}")
        return elemfn.convert_constant(self.name, value if isinstance(value, numbers.Integral) else float(value))


float32 = DType("float32", "f32", 4)
float16 = DType("float16", "f16", 2)
bfloat16 = DType("bfloat16", "bf16", 2)
int8 = DType("int8", "i8", 1, INT)
uint8 = DType("uint8", "u8", 1, UINT)
int16 = DType("int16", "i16", 2, INT)
uint16 = DType("uint16", "u16", 2, UINT)  # bit patterns (T.reinterpret to a 16-bit float)
int32 = DType("int32", "i32", 4, INT)
int64 = DType("int64", "i64", 8, INT)  # values within int32's range: docs/dtypes.md
# fp8: gfx950 has the OCP encodings (e4m3fn: no inf, NaN 0x7F/0xFF; e5m2: IEEE-like), gfx942 the "fnuz" ones (no
# inf, no -0, one NaN 0x80): arch.Arch.fp8_dtypes. Each is a torch dtype of the same name.
float8_e4m3fn = DType("float8_e4m3fn", "fp8", 1)
float8_e5m2 = DType("float8_e5m2", "bf8", 1)
float8_e4m3fnuz = DType("float8_e4m3fnuz", "fp8", 1)
float8_e5m2fnuz = DType("float8_e5m2fnuz", "bf8", 1)
# packed fp4 (MXFP4 operands, issue 22): a tensor of K/2 bytes holds K values, element 2b in the low nibble of byte b
float4_e2m1fn_x2 = DType("float4_e2m1fn_x2", "fp4", 1)
DTYPES = {d.name: d for d in (float32, float16, bfloat16, int8, uint8, int16, uint16, int32, int64, float8_e4m3fn,
                              float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float4_e2m1fn_x2)}
_ALIASES = {"float": float32, "fp32": float32, "f32": float32, "half": float16, "fp16": float16, "f16": float16,
            "bf16": bfloat16, "int": int32, "long": int64, "char": int8, "short": int16, "uchar": uint8}


def _torch_dtype_name(x) -> str | None:
    """"bfloat16" for torch.bfloat16 (whose str is "torch.bfloat16"), None for anything not a torch dtype."""
    if type(x).__module__ == "torch" and type(x).__name__ == "dtype":
        return str(x).removeprefix("torch.")
    return None


def as_dtype(x) -> DType:
    """A DType from a DType, a name ("bfloat16", "bf16", ...) or a torch dtype."""
    if isinstance(x, DType):
        return x
    torch_name = _torch_dtype_name(x)
    if torch_name is not None:
        if torch_name in DTYPES:
            return DTYPES[torch_name]
    elif isinstance(x, str):
        key = x.lower()
        if key in DTYPES:
            return DTYPES[key]
        if key in _ALIASES:
            return _ALIASES[key]
    raise ArgumentError(f"tilegcn: unsupported dtype {x!r}; supported: {', '.join(DTYPES)}")


@dataclass(frozen=True)
class TensorSpec:
    """What a compiled kernel is specialised on for one tensor argument."""

    dtype: DType
    shape: tuple
    strides: tuple  # in elements
    aligned16: bool  # data pointer is a multiple of 16 bytes

    @property
    def nbytes(self) -> int:
        """Bytes from the first element to one past the last (the buffer's NUM_RECORDS)."""
        if any(s == 0 for s in self.shape):
            return 0
        return (1 + sum((n - 1) * st for n, st in zip(self.shape, self.strides))) * self.dtype.bytes

    @classmethod
    def of(cls, t, name: str = "argument") -> "TensorSpec":
        """The spec of torch tensor `t`."""
        try:
            dtype = as_dtype(t.dtype)
        except ArgumentError:
            raise ArgumentError(
                f"tilegcn: tensor {name} has dtype {t.dtype}; supported: {', '.join(DTYPES)}"
            ) from None
        return cls(dtype, tuple(t.shape), tuple(t.stride()), t.data_ptr() % 16 == 0)
