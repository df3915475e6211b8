"""Scalar dtypes and the specialisation description of a tensor argument."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from ..errors import ArgumentError


@dataclass(frozen=True)
class DType:
    name: str  # "float32", "float16", "bfloat16"
    short: str  # "f32", "f16", "bf16" (MFMA / asm suffix)
    bytes: int
    torch: torch.dtype

    def __repr__(self):
        return self.name

    @property
    def is_16bit(self) -> bool:
        return self.bytes == 2

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
        return elemfn.round_to(self.name, float(value))


float32 = DType("float32", "f32", 4, torch.float32)
float16 = DType("float16", "f16", 2, torch.float16)
bfloat16 = DType("bfloat16", "bf16", 2, torch.bfloat16)
int32 = DType("int32", "i32", 4, torch.int32)  # runtime int scalars only, not tensors
DTYPES = {d.name: d for d in (float32, float16, bfloat16)}
_ALIASES = {"float": float32, "fp32": float32, "f32": float32, "half": float16, "fp16": float16, "f16": float16,
            "bf16": bfloat16}
_BY_TORCH = {d.torch: d for d in DTYPES.values()}


def as_dtype(x) -> DType:
    """A DType from a DType, a name ("bfloat16", "bf16", ...) or a torch dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, torch.dtype):
        if x in _BY_TORCH:
            return _BY_TORCH[x]
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
    def of(cls, t: torch.Tensor, name: str = "argument") -> "TensorSpec":
        try:
            dtype = as_dtype(t.dtype)
        except ArgumentError:
            raise ArgumentError(
                f"tilegcn: tensor {name} has dtype {t.dtype}; supported: {', '.join(DTYPES)}"
            ) from None
        return cls(dtype, tuple(t.shape), tuple(t.stride()), t.data_ptr() % 16 == 0)
