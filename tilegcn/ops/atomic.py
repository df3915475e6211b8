"""`T.atomic_add / atomic_max / atomic_min`: read-modify-writes of global or shared elements that every thread and
workgroup may apply to one element (passes/atomic.py lowers them).

Two statements: `ParallelAtomic`, the element form inside T.Parallel (`T.atomic_add(C[by * bm + i, j], c[i, j])`),
which memory staging (passes/memspace.py) turns into a T.Parallel store of the value into a fresh fragment (fp32;
int32 for an int32 destination) and an `Atomic` of that fragment (or an `Atomic` of the fragment whose own element
the value is); and `Atomic`, the tile form (`T.atomic_add(C[by * bm, bx * bn], c)`): each element of a
fragment applied to the element of the destination its `index` names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy

from ..errors import CompileError, InternalError
from ..ir.layout import Same
from ..ir.nodes import FRAGMENT, GLOBAL, SHARED, Buffer, ElemRef, Region, walk_expr
from ..ir.ops import TileOp, op_class, register, whole
from ..passes.atomic import ANY, lower_atomic
from ..passes.memspace import stage_parallel

def _show_index(index, symbols) -> str:
    names = {s: sympy.Symbol(str(s)[1:]) if str(s).startswith("p") else s for s in symbols}  # p_i -> i
    return ", ".join(str(sympy.sympify(k).xreplace(names)) for k in index)


@register
@dataclass(eq=False)
class Atomic(TileOp):
    """for each element e of fragment `src` (its coordinates named by `indices`): dst[index] op= src[e], `prev[e]` (a
    fragment of src's shape, or None) receiving the element's value before this update."""

    opname: ClassVar[str] = "atomic"
    op: str  # "add", "max" or "min"
    src: Buffer  # a fragment (shared and global values are staged into one)
    indices: tuple  # SymPy symbols, one per src dim
    dst: Buffer  # global or shared
    index: tuple  # SymPy, one per dst dim, in `indices` (dims() says how each moves)
    prev: Buffer | None = None

    def print_to(self, out):
        ret = f"{self.prev.name}[{', '.join(map(str, self.indices))}] = " if self.prev is not None else ""
        at = ", ".join(out.index(k) for k in self.index)
        out.line(f"{ret}atomic_{self.op} ({', '.join(map(str, self.indices))}) in {tuple(self.src.shape)}: "
                 f"{self.dst.name}[{at}] <- {self.src.name}[{', '.join(map(str, self.indices))}]")

    def verify(self, scope):
        if self.dst.scope not in (GLOBAL, SHARED):
            raise CompileError(f"T.atomic_{self.op} into {self.dst.scope} {self.dst.name}: atomics update global "
                               "tensors and shared buffers; a fragment element belongs to one thread, so update it "
                               f"with a plain store ({self.dst.name}[i] = T.max({self.dst.name}[i], v))",
                               location=self.loc)
        scope.check_region_bounds(self.region(), self.loc)  # a shared element at a constant index past its end

    def dims(self) -> tuple:
        """(starts, what each dst dim moves with): a src dim (the index is the start plus that src index), None (the
        start alone) or ANY (another expression of the src indices, `bins[i % 16]`: its start is 0, its extent the
        whole dim; in a global tensor each element is masked at the tensor's edge, in a shared buffer it must stay
        inside the buffer, as any LDS index must)."""
        if len(self.index) != len(self.dst.shape):
            where = f"T.atomic_{self.op}({self.dst.name}[{_show_index(self.index, self.indices)}], ...)"
            raise CompileError(f"{where}: {self.dst.name} has {len(self.dst.shape)} dims, indexed with "
                               f"{len(self.index)}", location=self.loc)
        starts, moving = [], []
        for k in (sympy.expand(sympy.sympify(k)) for k in self.index):
            used = [d for d, i in enumerate(self.indices) if k.has(i)]
            start = k.xreplace({i: 0 for i in self.indices})
            if not used:
                starts.append(start)
                moving.append(None)
            elif len(used) == 1 and sympy.expand(k - self.indices[used[0]] - start) == 0:
                starts.append(start)
                moving.append(used[0])
            else:
                starts.append(sympy.Integer(0))
                moving.append(ANY)
        return tuple(starts), tuple(moving)

    def region(self) -> Region:
        """The box of dst the update may touch (the extents of the src dims that move it; a whole dim for ANY)."""
        starts, moving = self.dims()
        return Region(self.dst, starts, tuple(1 if d is None else self.dst.shape[k] if d is ANY else self.src.shape[d]
                                              for k, d in enumerate(moving)))

    def reads(self):
        return (whole(self.src), self.region())

    def writes(self):
        return (self.region(),) + ((whole(self.prev),) if self.prev is not None else ())

    def layout_constraints(self, gemm_plans, threads):
        """The returned old values land in prev's element e on the thread holding src's element e."""
        return (Same(self.src, self.prev, self),) if self.prev is not None else ()

    def staged(self, stager):
        if self.dst.scope == SHARED:
            stager.check_element_access(self.dst, f"T.atomic_{self.op} into", self.loc)
        return None

    def lower(self, ctx, lower_body):
        lower_atomic(ctx, self)


@register
@dataclass(eq=False)
class ParallelAtomic(TileOp):
    """for idx in Parallel(extents): buffer[index] op= value (the element form; staged into a store and an Atomic)."""

    opname: ClassVar[str] = "parallel_atomic"
    allowed_in_parallel: ClassVar[bool] = True
    op: str
    extents: tuple
    indices: tuple  # SymPy symbols, one per extent
    buffer: Buffer  # global or shared
    index: tuple
    value: object  # ir.nodes.Expr
    prev: Buffer | None = None

    def print_to(self, out):
        idx = ", ".join(str(i) for i in self.indices)
        at = ", ".join(out.index(k) for k in self.index)
        ret = f"{self.prev.name}[{idx}] = " if self.prev is not None else ""
        out.line(f"parallel ({idx}) in ({', '.join(map(str, self.extents))}): {ret}atomic_{self.op} "
                 f"{self.buffer.name}[{at}] <- {out.expr(self.value)}")

    def verify(self, scope):
        self._atomic(None).verify(scope)

    def reads(self):
        return self._atomic(None).reads()[1:] + tuple(whole(e.buffer) for e in walk_expr(self.value)
                                                      if isinstance(e, ElemRef))

    def writes(self):
        return self._atomic(None).writes()

    def _atomic(self, src: Buffer | None) -> Atomic:
        src = src or Buffer("value", FRAGMENT, self.buffer.dtype, tuple(self.extents))
        return Atomic(self.op, src, tuple(self.indices), self.buffer, tuple(self.index), self.prev, loc=self.loc)

    def staged(self, stager):
        """The value stored into a fresh fp32 fragment of the loop's extents (shared reads staged as T.Parallel's
        are), then an Atomic of that fragment; a value that is a fragment's own element (`C_local[i, j]`, split-K's
        epilogue) is applied from that fragment, with no copy (128 fewer VGPRs for upstream's 128 x 128 tile)."""
        v = self.value
        if isinstance(v, ElemRef) and v.buffer.scope == FRAGMENT and tuple(v.index) == tuple(self.indices) \
                and tuple(v.buffer.shape) == tuple(self.extents):
            return [self._atomic(v.buffer)]
        values = stager.fragment(self.buffer, self.extents, self.loc)
        if self.buffer.dtype.name == "int32":  # int values stay ints (exact past 2^24), as a store into an int tensor
            values.dtype = self.buffer.dtype
        store = op_class("parallel")(tuple(self.extents), tuple(self.indices), values, self.value, loc=self.loc)
        atomic = self._atomic(values)
        return (stage_parallel(store, stager) or [store]) + (atomic.staged(stager) or [atomic])

    def lower(self, ctx, lower_body):
        raise InternalError("T.atomic_* in T.Parallel reached lowering unstaged (passes/memspace.py stages it)")
