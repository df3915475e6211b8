"""The tile language, imported as `from tilegcn import language as T`."""
from ..ir.types import bfloat16, float16, float32
from .builtins import (Kernel, Parallel, Pipelined, Tensor, abs, alloc_fragment, alloc_shared, cast, ceildiv,
                       clear, copy, exp, exp2, fill, gemm, max, min, print, use_swizzle)
from .control import Serial, serial
from .local import alloc_local, alloc_var
from .program import const, dtype, prim_func
from .reducer import alloc_reducer, finalize_reducer
from .tracer import trace

float = float32  # noqa: A001 - TileLang's spelling of float32 (`T.float`)

__all__ = ["Kernel", "Parallel", "Pipelined", "Serial", "Tensor", "abs", "alloc_fragment", "alloc_local",
           "alloc_reducer", "alloc_shared", "alloc_var", "cast", "ceildiv", "clear", "const", "copy", "dtype", "exp",
           "exp2", "fill", "finalize_reducer", "gemm", "max", "min", "prim_func", "print", "serial", "use_swizzle",
           "trace", "float", "float32", "float16", "bfloat16"]
