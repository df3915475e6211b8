"""The tile language, imported as `from tilegcn import language as T`."""
from ..ir.types import (bfloat16, float4_e2m1fn_x2, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
                         float16, float32, int8, int16, int32, int64, uint8, uint16)
from .atomic import atomic_add, atomic_max, atomic_min
from .builtins import (GemmWarpPolicy, Kernel, Parallel, Pipelined, Tensor, alloc_fragment, alloc_global, alloc_shared,
                       ceildiv, clear, copy, empty, fill, gemm, print, use_swizzle)
from .control import Persistent, Serial, serial
from .dynamic import dynamic, symbolic
from .elementwise import (Cast, abs, cast, clamp, erf, exp, exp2, if_then_else, infinity, log, log2, max, max_value,
                          min, min_value, rsqrt, sigmoid, sqrt, tanh)
from .local import alloc_local, alloc_var
from .program import const, dtype, prim_func
from .reduce import reduce_absmax, reduce_abssum, reduce_max, reduce_min, reduce_sum
from .reducer import alloc_reducer, finalize_reducer
from .scan import cumsum
from .tir import annotate_layout, get_block_binding, macro, reinterpret, shift_left, shift_right
from .tracer import trace

float = float32  # noqa: A001 - TileLang's spelling of float32 (`T.float`)

__all__ = ["Kernel", "Parallel", "Pipelined", "Tensor", "alloc_fragment", "alloc_global", "alloc_shared", "ceildiv",
           "clear", "copy", "empty", "fill", "gemm", "GemmWarpPolicy", "print", "use_swizzle", "trace",
           "abs", "max", "min", "clamp", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
           "if_then_else", "cast", "Cast", "infinity", "max_value", "min_value",
           "reduce_sum", "reduce_max", "reduce_min", "reduce_absmax", "reduce_abssum", "cumsum",
           "atomic_add", "atomic_max", "atomic_min",
           "serial", "Serial", "Persistent", "alloc_local", "alloc_var", "alloc_reducer", "finalize_reducer", "prim_func", "const",
           "dtype", "float", "float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16", "int32", "int64",
           "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float4_e2m1fn_x2", "dynamic",
           "symbolic",
           "macro", "get_block_binding", "shift_left", "shift_right", "reinterpret", "annotate_layout"]
