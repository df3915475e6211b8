"""TileLang names that come from TVM's TIR and its script frontend: T.macro, T.get_block_binding, T.shift_left /
T.shift_right, T.reinterpret, T.annotate_layout (with tilegcn.layout.make_swizzled_layout)."""
from __future__ import annotations

import functools
import numbers

from ..errors import CompileError
from ..ir import nodes as N
from ..ir.types import as_dtype
from .proxies import BufferProxy, IndexProxy


def macro(fn):
    """A helper whose body is traced where it is called (TileLang's `@T.macro`): its T.* statements join the
    kernel at the call; device `if` / `while` in it are rewritten as in the kernel body.

    Example:

    ```python
    @T.macro
    def double_into(src, dst):
        for i in T.Parallel(64):
            dst[i] = src[i] * 2.0
    ```
    """
    from .flow import rewritten

    @functools.wraps(fn)
    def traced_here(*args, **kwargs):
        return rewritten(fn)(*args, **kwargs)

    return traced_here


def get_block_binding(dim: int = 0):
    """The block index of grid dimension `dim` of the enclosing T.Kernel (`bx` for 0, `by` for 1, ...), for code
    (a T.macro) that does not see the names T.Kernel gave.

    Example:

    ```python
    bx = T.get_block_binding(0)  # the same value as `bx` of `with T.Kernel(...) as (bx, by)`
    ```
    """
    from .tracer import current

    ids = current().grid_ids
    if not ids:
        raise CompileError("T.get_block_binding outside `with T.Kernel(...)`: there is no block index yet; call it "
                           "inside the kernel body")
    if not isinstance(dim, numbers.Integral) or not 0 <= dim < len(ids):
        raise CompileError(f"T.get_block_binding({dim!r}): the kernel has {len(ids)} grid dimension(s); pass 0 .. "
                           f"{len(ids) - 1}")
    return IndexProxy.of(ids[dim][1], f"the block index {ids[dim][1]}")


def shift_left(x, n):
    """`x << n` on integers (TileLang's T.shift_left): elementwise inside T.Parallel, or on numbers.

    Example:

    ```python
    y[i] = T.shift_left(1, e[i])  # 2 ** e[i] as an int
    ```
    """
    return _int_operand(x) << _int_operand(n)


def _int_operand(x):
    """A number as it is, a device value (a block index, a T.Parallel index) as an element expression: index
    arithmetic has no shifts."""
    return x if isinstance(x, numbers.Number) else N.lift(x)


def shift_right(x, n):
    """`x >> n` on integers (TileLang's T.shift_right): `>>` of the element's 32-bit int (docs/dtypes.md).

    Example:

    ```python
    hi[i] = T.shift_right(packed[i], 4)  # the high nibble of a byte
    ```
    """
    return _int_operand(x) >> _int_operand(n)


def reinterpret(dtype, value):
    """The bits of integer element expression `value` read as float `dtype` (TileLang's / TVM's T.reinterpret):
    bfloat16 or float16 from the low 16 bits, float32 from 32; or as an integer dtype: its width of low bits, signed
    or not (0xF0 as T.int8 is -16: the two's complement wrap of a cast). Elementwise inside T.Parallel.

    Example:

    ```python
    y[i] = T.reinterpret(T.bfloat16, (bits[i] & 0xFFFF).astype(T.uint16))  # 0x3F80 -> 1.0
    n[i] = T.reinterpret(T.int8, (u[i] << T.const(4, T.uint8)).astype(T.uint8)) >> T.const(4, T.int8)  # int4 code
    ```
    """
    dtype = as_dtype(dtype)
    if dtype.name not in ("bfloat16", "float16", "float32") and not dtype.is_int:
        raise CompileError(f"T.reinterpret({dtype.name}, ...): tilegcn reinterprets integer bits as bfloat16, "
                           "float16, float32 or an integer dtype")
    x = N.lift(value)
    if N.value_kind(x) == N.FLOAT:
        raise CompileError(f"T.reinterpret({dtype.name}, x): x is a float expression; tilegcn reinterprets integer "
                           "bits (cast x to an integer dtype with .astype first)")
    if dtype.is_int:  # the low bits of a two's complement int as another int: what the wrapping cast gives
        return N.Cast(dtype, x)
    return N.Reinterpret(dtype, x)


class SwizzledLayout:
    """What tilegcn.layout.make_swizzled_layout gives: the request that a shared buffer be laid out against bank
    conflicts."""

    def __init__(self, buffer):
        self.buffer = buffer


def annotate_layout(layouts: dict):
    """TileLang's layout annotation. tilegcn lays out shared memory itself (T.gemm operand tiles XOR-swizzled for
    the matrix cores, other shared buffers with padded rows against bank conflicts), so a
    `tilegcn.layout.make_swizzled_layout(buf)` annotation of a shared buffer is already what it gets and changes
    nothing; any other layout is refused.

    Example:

    ```python
    T.annotate_layout({B_shared: tilegcn.layout.make_swizzled_layout(B_shared)})
    ```
    """
    for buffer, layout in dict(layouts).items():
        name = getattr(getattr(buffer, "buffer", None), "name", repr(buffer))
        if not isinstance(layout, SwizzledLayout):
            raise CompileError(f"T.annotate_layout for {name}: tilegcn chooses fragment and shared layouts itself "
                               "and takes only tilegcn.layout.make_swizzled_layout(buf) for a shared buffer; drop "
                               "the annotation")
        if not isinstance(buffer, BufferProxy) or buffer.buffer.scope != N.SHARED:
            raise CompileError(f"T.annotate_layout: make_swizzled_layout applies to shared buffers (T.alloc_shared), "
                               f"not {name}; drop the annotation")
