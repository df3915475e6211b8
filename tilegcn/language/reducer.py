"""`T.alloc_reducer` / `T.finalize_reducer`: TileLang's (v1, `replication="all"`) reducer.

A reducer `r` is a small fragment that a `T.Parallel` loop updates at fewer indices than the loop has,
`r[i] += a[i, j] * x[j]` inside `T.Parallel(M, N)`: many (i, j) contribute to one r[i]. TileLang keeps per-thread
partial values and combines them at `T.finalize_reducer(r)`. tilegcn does the same with a hidden fragment of the
loop's shape, `r_partial[i, j]`, that each update accumulates into elementwise (every element has one owner, so
no two threads write one element); `T.finalize_reducer` reduces it along the dimension the updates left out (a
`T.reduce_*`) and combines the result into `r`. The partials start at the op's identity where `T.alloc_reducer`
was called.
"""
from __future__ import annotations

import math

import sympy

from .. import ops
from ..errors import CompileError, user_location
from ..ir import nodes as N
from ..ir.types import float32
from .proxies import BufferProxy
from .tracer import current

_IDENTITY = {"sum": 0.0, "max": -math.inf, "min": math.inf}
_COMBINE = {"sum": "add", "max": "max", "min": "min"}  # the element op an update combines with


def _combine(op: str, a: N.Expr, b: N.Expr) -> N.Expr:
    """a (op) b as the element expression the program's own `+` / `T.max` / `T.min` builds."""
    from .. import language as T

    return a + b if op == "sum" else getattr(T, op)(a, b)


def _operands(e: N.Expr, name: str):
    """The two operands of `e` if it applies the element function `name` (`add`, `max`, `min`), else None."""
    if isinstance(e, N.Call) and e.fn == name and len(e.args) == 2:
        return tuple(e.args)
    return None


class ReducerProxy(BufferProxy):
    """A reducer as the traced program sees it: a fragment whose T.Parallel updates are deferred partials."""

    def __init__(self, buffer: N.Buffer, op: str, body: list, position: int):
        super().__init__(buffer)
        self.op = op
        self.partial = None  # the hidden fragment, made at the first update (its shape is the loop's)
        self.reduced_dim = None
        self._init_site = (body, position)  # where the partials are set to the identity (before every update)
        self.finalized = False

    def __getitem__(self, key):
        if current().parallel is None:
            return super().__getitem__(key)
        return N.ElemRef(self.buffer, self._parallel_index(key))  # only meaningful as `r[i] op= ...` (checked)

    def __setitem__(self, key, value):
        tracer = current()
        if tracer.parallel is None:
            return super().__setitem__(key, value)
        index = self._parallel_index(key)
        contribution = self._contribution(index, value)
        extents, indices = tracer.parallel
        self._check_update(index, extents, indices)
        partial = self.partial.buffer
        combined = _combine(self.op, N.ElemRef(partial, tuple(indices)), contribution)
        tracer.record_parallel_store(partial, tuple(indices), combined)

    def _contribution(self, index, value) -> N.Expr:
        """`v` of an update `r[idx] = r[idx] <op> v` (what `r[idx] += v`, `T.max(r[idx], v)` give)."""
        operands = _operands(value, _COMBINE[self.op])
        for mine, other in (operands, operands[::-1]) if operands else ():
            if isinstance(mine, N.ElemRef) and mine.buffer is self.buffer and tuple(mine.index) == tuple(index):
                return other
        spelled = {"sum": f"{self.buffer.name}[...] += value", "max": f"{self.buffer.name}[...] = "
                   f"T.max({self.buffer.name}[...], value)", "min": f"{self.buffer.name}[...] = "
                   f"T.min({self.buffer.name}[...], value)"}[self.op]
        raise CompileError(f"reducer {self.buffer.name} (op={self.op!r}) is updated inside T.Parallel only as "
                           f"`{spelled}`, at the same index on both sides")

    def _check_update(self, index, extents, indices):
        """The update's index is the loop's indices with exactly one left out (the dimension reduced)."""
        kept = [k for k in indices if k in set(index)]
        left_out = [axis for axis, k in enumerate(indices) if k not in set(index)]
        if list(index) != kept or len(left_out) != 1 or len(index) != len(self.buffer.shape):
            raise CompileError(f"reducer {self.buffer.name}{list(self.buffer.shape)} updated at "
                               f"[{', '.join(map(str, index))}] inside T.Parallel{tuple(extents)}: index it with the "
                               "loop's indices in order, leaving out exactly one (the dimension it sums over)")
        if self.partial is None:
            self._make_partial(tuple(extents), left_out[0])
        elif tuple(self.partial.buffer.shape) != tuple(extents) or self.reduced_dim != left_out[0]:
            raise CompileError(f"reducer {self.buffer.name} is updated by T.Parallel loops of different shapes or "
                               f"over different dimensions ({self.partial.buffer.shape} over dim {self.reduced_dim},"
                               f" now {tuple(extents)} over dim {left_out[0]}); use one reducer per loop shape")

    def _make_partial(self, extents: tuple, reduced_dim: int):
        tracer = current()
        buf = N.Buffer(tracer.unique_name(f"{self.buffer.name}_partial"), N.FRAGMENT, float32, extents,
                       loc=self.buffer.loc)
        tracer.buffers.append(buf)
        self.partial, self.reduced_dim = BufferProxy(buf), reduced_dim
        body, position = self._init_site
        body.insert(position, ops.Fill(buf, _IDENTITY[self.op], loc=self.buffer.loc))


def alloc_reducer(shape, dtype, op: str = "sum", replication=None):
    """A reducer: a fragment that `T.Parallel` loops update at fewer indices than they have
    (`r[i] += a[i, j] * x[j]`), combined by `T.finalize_reducer(r)` (TileLang's reducer, `replication="all"`).

    `op` is "sum" (`r[i] += v`), "max" (`r[i] = T.max(r[i], v)`) or "min". Updates may sit in loops
    (`T.Pipelined`, `T.serial`); the partial values are held in a hidden float32 fragment of the loop's shape and
    reduced once, at `T.finalize_reducer`. `replication` is accepted for TileLang's spelling ("all"; the partials
    are always per element).

    Example:

    ```python
    o_reducer = T.alloc_reducer(block_M, "float32", replication="all")
    T.clear(o_reducer)
    for k in T.Pipelined(T.ceildiv(N, block_N)):
        ...
        for i, j in T.Parallel(block_M, block_N):
            o_reducer[i] += a_frag[i, j] * x_frag[j]
    T.finalize_reducer(o_reducer)
    ```
    """
    tracer = current()
    loc = user_location()
    if op not in _IDENTITY:
        raise CompileError(f"T.alloc_reducer(op={op!r}): tilegcn's reducers are {', '.join(_IDENTITY)}", location=loc)
    if replication not in (None, "all", "none"):
        raise CompileError(f"T.alloc_reducer(replication={replication!r}): \"all\" or \"none\" (TileLang's v1 "
                           "spelling; tilegcn keeps one partial per element either way)", location=loc)
    if tracer.parallel is not None:
        raise CompileError("T.alloc_reducer inside T.Parallel: allocate it before the loop", location=loc)
    proxy = tracer.alloc(N.FRAGMENT, shape, dtype, "reducer")
    body = tracer.body()
    return ReducerProxy(proxy.buffer, op, body, len(body))


def finalize_reducer(reducer):
    """Combine a reducer's partial values into it: after this, `r[i]` holds its initial value combined (op) with
    every update since `T.alloc_reducer`. Call it once, after the loops that update it.

    Example:

    ```python
    T.finalize_reducer(o_reducer)
    T.copy(o_reducer, o[bx * block_M])
    ```
    """
    loc = user_location()
    if not isinstance(reducer, ReducerProxy):
        raise CompileError(f"T.finalize_reducer takes a buffer from T.alloc_reducer, got {reducer!r}", location=loc)
    if reducer.finalized:
        raise CompileError(f"T.finalize_reducer({reducer.buffer.name}) twice: finalize a reducer once, after its "
                           "updates", location=loc)
    reducer.finalized = True
    if reducer.partial is None:  # never updated: it keeps its value
        return
    from .. import language as T  # the T.reduce_* family (tilegcn/language), looked up when used

    tracer = current()
    r = reducer.buffer
    total = tracer.alloc(N.FRAGMENT, r.shape, float32, f"{r.name}_total")
    reduce = getattr(T, f"reduce_{reducer.op}")
    reduce(reducer.partial, total, dim=reducer.reduced_dim, clear=True)
    indices = tuple(sympy.Symbol(f"p{n}", integer=True, nonnegative=True) for n in "ijlm"[: len(r.shape)])
    value = _combine(reducer.op, N.ElemRef(r, indices), N.ElemRef(total.buffer, indices))
    tracer.record(ops.ParallelStore(tuple(r.shape), indices, r, value, loc=loc))
