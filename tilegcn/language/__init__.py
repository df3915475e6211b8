"""The tile language, imported as `from tilegcn import language as T`."""
from ..ir.types import bfloat16, float16, float32
from .builtins import (Kernel, Parallel, Pipelined, Tensor, abs, alloc_fragment, alloc_shared, cast, ceildiv,
                       clear, copy, exp, exp2, fill, gemm, max, min, print, use_swizzle)
from .reduce import reduce_absmax, reduce_abssum, reduce_max, reduce_min, reduce_sum
from .tracer import trace

__all__ = ["Kernel", "Parallel", "Pipelined", "Tensor", "abs", "alloc_fragment", "alloc_shared", "cast", "ceildiv",
           "clear", "copy", "exp", "exp2", "fill", "gemm", "max", "min", "print", "reduce_absmax", "reduce_abssum",
           "reduce_max", "reduce_min", "reduce_sum", "use_swizzle", "trace",
           "float32", "float16", "bfloat16"]
