"""T.atomic_add / T.atomic_max / T.atomic_min, spelled as TileLang spells them (tilelang/language/atomic.py):
`atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False)`, max / min without use_tma.

Two forms. Inside `T.Parallel`, `dst` is an element of a global tensor or shared buffer (`C[by * bm + i, j]`) and
`value` an element expression; `return_prev=True` returns the element's value before this update, as an element
to use in the same loop. Outside, `dst` is a region start (`C[by * bm, bx * bn]`) or a whole shared buffer and
`value` a fragment or shared buffer: every element is applied (TileLang has no return_prev there either).
Ordering: docs/language.md, "Atomics".
"""
from __future__ import annotations

import sympy

from ..errors import CompileError, user_location
from ..ir import nodes as N
from .. import ops
from .builtins import _as_region, _squeeze
from .proxies import BufferProxy, RegionRef, as_expr
from .tracer import current

# TileLang's memory orders; tilegcn's atomics are relaxed (module docs / docs/language.md)
MEMORY_ORDERS = ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst")


def atomic_add(dst, value, memory_order=None, return_prev: bool = False, use_tma: bool = False, annotations=None):
    """Atomically add `value` to `dst`: a global or shared element inside `T.Parallel`, or a tile of them.

    Every update from every thread and workgroup is applied (none is lost); float adds happen in an order the
    device picks, so a sum may differ from torch's in its last bits. `return_prev=True` (element form) returns the
    element's value before this update. `memory_order` may be None or "relaxed"; `use_tma` (an NVIDIA copy engine)
    and `annotations` are accepted and ignored.

    Example:

    ```python
    for i, j in T.Parallel(block_M, block_N):          # split-K: each K slice adds its partial product
        T.atomic_add(C[by * block_M + i, bx * block_N + j], C_local[i, j])
    T.atomic_add(C[by * block_M, bx * block_N], C_local)  # the same, as a tile
    ```
    """
    return _atomic("add", dst, value, memory_order, return_prev)


def atomic_max(dst, value, memory_order=None, return_prev: bool = False, annotations=None):
    """Atomically set `dst` to the larger of itself and `value` (element form inside `T.Parallel`, or a tile).

    fp32 follows torch.maximum for numbers (-0.0 < +0.0); a NaN counts by its sign bit (a positive NaN wins, a
    negative one loses). float16 / bfloat16 (global memory only) follow torch.maximum, NaN included. int32 too.
    `return_prev=True` (element form) returns the element's value before this update.

    Example:

    ```python
    for i in T.Parallel(block):
        T.atomic_max(Out[0], x[i])                     # the largest element over every block
    ```
    """
    return _atomic("max", dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order=None, return_prev: bool = False, annotations=None):
    """Atomically set `dst` to the smaller of itself and `value` (element form inside `T.Parallel`, or a tile).

    As T.atomic_max, mirrored: an fp32 NaN with its sign bit set wins, one without loses.

    Example:

    ```python
    for i in T.Parallel(block):
        old[i] = T.atomic_min(Out[bx * block + i], x[i], return_prev=True)
    ```
    """
    return _atomic("min", dst, value, memory_order, return_prev)


def _atomic(op: str, dst, value, memory_order, return_prev: bool):
    tracer, loc, name = current(), user_location(), f"T.atomic_{op}"
    if memory_order not in (None, "relaxed"):
        why = "is not a memory order" if memory_order not in MEMORY_ORDERS else "is not supported"
        raise CompileError(f"{name}(..., memory_order={memory_order!r}) {why}: tilegcn's atomics are relaxed (each "
                           "update is atomic; no order with other memory accesses is promised). Drop memory_order "
                           "(or pass \"relaxed\") and order the phases of a kernel with separate launches",
                           location=loc)
    if tracer.parallel is not None:
        return _element_form(tracer, op, dst, value, return_prev, name, loc)
    if return_prev:
        raise CompileError(f"{name}(..., return_prev=True) on a tile: the old values are returned by the element form "
                           f"only (as in TileLang): write it inside `for i, j in T.Parallel(...)`", location=loc)
    src = value.buffer if isinstance(value, BufferProxy) else None
    if src is None or src.scope == N.GLOBAL:
        raise CompileError(f"{name}(dst, value) outside T.Parallel: value must be a fragment or shared buffer (the "
                           f"tile to apply), got {value!r}; for one element write it inside T.Parallel", location=loc)
    if not isinstance(dst, (BufferProxy, RegionRef)) or dst.buffer.scope == N.FRAGMENT:
        raise CompileError(f"{name}: dst must be a global tensor region (`C[by * block_M, bx * block_N]`) or a shared "
                           f"buffer, got {dst!r}", location=loc)
    try:
        region = _as_region(dst, tuple(src.shape), f"{name} destination")
    except CompileError as e:
        raise CompileError(e.raw_message, location=loc) from None
    if _squeeze(region.extents) != _squeeze(tuple(src.shape)):
        raise CompileError(f"{name}: the tile {src.name}{list(src.shape)} does not match the destination's extents "
                           f"{list(region.extents)}", location=loc)
    if src.scope == N.SHARED:  # a shared tile's values are read through a fragment
        frag = tracer.alloc(N.FRAGMENT, src.shape, "float32", f"{src.name}_values").buffer
        tracer.record(ops.Copy(N.Region(src, (0,) * len(src.shape), tuple(src.shape)),
                               N.Region(frag, (0,) * len(src.shape), tuple(src.shape)), loc=loc))
        src = frag
    symbols = tuple(sympy.Symbol(f"e{d}", integer=True, nonnegative=True) for d in range(len(src.shape)))
    kept = [d for d, e in enumerate(region.extents) if e != 1]
    src_dims = [d for d, e in enumerate(src.shape) if e != 1]
    index = list(region.starts)
    for gd, fd in zip(kept, src_dims):
        index[gd] = region.starts[gd] + symbols[fd]
    tracer.record(ops.Atomic(op, src, symbols, region.buffer, tuple(index), loc=loc))
    return None


def _element_form(tracer, op: str, dst, value, return_prev: bool, name: str, loc):
    if not isinstance(dst, N.ElemRef):
        raise CompileError(f"{name} inside T.Parallel updates one element: index it (`C[by * block_M + i, j]`), got "
                           f"{dst!r}", location=loc)
    if dst.buffer.scope == N.FRAGMENT:
        raise CompileError(f"{name} into fragment {dst.buffer.name}: a fragment element belongs to one thread, so "
                           f"no atomic is needed: {dst.buffer.name}[i] = {dst.buffer.name}[i] + v (or T.max / T.min)",
                           location=loc)
    value = as_expr(value)
    if N.is_condition(value):
        raise CompileError(f"{name}: a comparison is a condition, not a value; pick one with T.if_then_else",
                           location=loc)
    extents, indices = tracer.parallel
    prev = None
    if return_prev:  # the old values in the dst's own type where it is int32 (exact), else in fp32
        dtype = dst.buffer.dtype if dst.buffer.dtype.name == "int32" else "float32"
        prev = tracer.alloc(N.FRAGMENT, tuple(extents), dtype, f"{dst.buffer.name}_prev").buffer
    tracer.body().append(ops.ParallelAtomic(op, tuple(extents), tuple(indices), dst.buffer, tuple(dst.index), value,
                                            prev, loc=loc))
    return N.ElemRef(prev, tuple(indices)) if prev is not None else None
