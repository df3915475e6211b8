"""`for idx in T.Parallel(extents): buffer[idx] = value`: an element expression stored into a fragment
(passes/elementwise.py lowers it, element by element of the fragment's layout)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..errors import CompileError
from ..ir.layout import ExpandOf, Same, SliceOf, Whole
from ..ir.nodes import FRAGMENT, Buffer, Call, Cast, ElemRef, Expr, walk_expr
from ..ir.ops import TileOp, register, whole
from ..passes.elementwise import lower_parallel
from ..passes.memspace import stage_parallel
from .convert_layout import ConvertLayout


@register
@dataclass(eq=False)
class ParallelStore(TileOp):
    """for idx in Parallel(extents): buffer[idx] = value."""

    opname: ClassVar[str] = "parallel"
    allowed_in_parallel: ClassVar[bool] = True
    extents: tuple
    indices: tuple  # SymPy symbols, one per extent
    buffer: Buffer
    value: Expr
    index: tuple | None = None  # a global tensor's store index (SymPy); None: the loop indices (passes/memspace.py)

    def print_to(self, out):
        idx = ", ".join(str(i) for i in self.indices)
        ext = ", ".join(str(e) for e in self.extents)
        at = idx if self.index is None else ", ".join(out.index(k) for k in self.index)
        out.line(f"parallel ({idx}) in ({ext}): {self.buffer.name}[{at}] = {out.expr(self.value)}")

    def staged(self, stager):
        """Shared reads and shared / global stores go through staging fragments (passes/memspace.py)."""
        return stage_parallel(self, stager)

    def _element_refs(self) -> list:
        return [e for e in walk_expr(self.value) if isinstance(e, ElemRef)]

    def reads(self):
        """Every buffer the expression reads, whole (its elements are read at the loop's indices)."""
        return tuple(whole(e.buffer) for e in self._element_refs())

    def writes(self):
        return (whole(self.buffer),)

    def layout_constraints(self, gemm_plans, threads):
        """Each fragment read at the loop's indices shares the stored fragment's layout (element r of both is in
        one thread's registers); one read at some of them in order (x[i] in T.Parallel(M, N)) has the slice of
        that layout along the others; one read at constants (x[0]) is held whole by every thread."""
        rules = []
        for ref in self._element_refs():
            x, index = ref.buffer, tuple(ref.index)
            if x.scope != FRAGMENT:
                continue
            if index == tuple(self.indices):
                if tuple(x.shape) != tuple(self.buffer.shape):
                    raise CompileError(f"fragments {x.name}{list(x.shape)} and {self.buffer.name}"
                                       f"{list(self.buffer.shape)} in one T.Parallel must have the same shape",
                                       location=self.loc)
                rules.append(Same(x, self.buffer, self, index))
            elif all(getattr(i, "is_Integer", False) for i in index):
                rules.append(Whole(x, self, index))
            elif any(i not in self.indices for i in index):
                rules.append(self._expanded_read(x, index))
            else:
                kept = [self.indices.index(i) for i in index]  # the tracer lets only loop indices, in order, through
                if tuple(x.shape) != tuple(self.extents[d] for d in kept):
                    named = ", ".join(str(i)[1:] for i in index)  # p_i -> i, as the user wrote it
                    raise CompileError(f"{x.name}{list(x.shape)} read at [{named}] in "
                                       f"T.Parallel{tuple(self.extents)}: its shape must be the extents of those "
                                       "indices", location=self.loc)
                dropped = tuple(d for d in range(len(self.indices)) if d not in kept)
                rules.append(SliceOf(x, self.buffer, dropped, self, index))
        return tuple(rules)

    def _expanded_read(self, x, index) -> ExpandOf:
        """x[k, i]: constants on some dims, every loop index in order on the others. Each thread holds x whole
        along the constant dims beside its own loop elements (a loop variable there is a constant once its loop
        is unrolled: language/unroll.py)."""
        added = tuple(d for d, i in enumerate(index) if i not in self.indices)
        looped = tuple(i for i in index if i in self.indices)
        named = ", ".join(str(i)[1:] if i in self.indices else str(i) for i in index)  # p_i -> i
        if looped != tuple(self.indices) or tuple(x.shape[d] for d in range(len(index)) if d not in added) != \
                tuple(self.extents):
            raise CompileError(f"{x.name}{list(x.shape)} read at [{named}] in T.Parallel{tuple(self.extents)}: "
                               "beside constant indices, read every loop index in order over dims of the loop's "
                               "extents (x[k, i] in T.Parallel(M) with x of shape (K, M))", location=self.loc)
        for d in added:
            if not getattr(index[d], "is_Integer", False) or not 0 <= int(index[d]) < x.shape[d]:
                raise CompileError(f"{x.name}[{named}] in T.Parallel: index {index[d]} on dim {d} must be a "
                                   f"constant in [0, {x.shape[d]}) (a loop variable of a loop with a compile-time "
                                   "trip count is one: tilegcn unrolls that loop)", location=self.loc)
        return ExpandOf(x, self.buffer, added, self, index)

    def converted(self, rule, fresh):
        """Read a converted copy of the fragment whose layout disagrees (a ConvertLayout right before)."""
        x = getattr(rule, "a", None) if isinstance(rule, Same) else rule.buffer
        if rule.read is None or x is None or x is self.buffer:
            return None
        copy, scratch = fresh(x)
        value = _replace_reads(self.value, x, rule.read, copy)
        return [ConvertLayout(x, copy, scratch, loc=self.loc), dataclasses.replace(self, value=value)]

    def lower(self, ctx, lower_body):
        lower_parallel(ctx, self)


def _replace_reads(e: Expr, x: Buffer, index: tuple, by: Buffer) -> Expr:
    """`e` with its reads of `x` at `index` reading `by` instead."""
    if isinstance(e, ElemRef):
        return ElemRef(by, e.index) if e.buffer is x and tuple(e.index) == index else e
    if isinstance(e, Call):
        return dataclasses.replace(e, args=tuple(_replace_reads(a, x, index, by) for a in e.args))
    if isinstance(e, Cast):
        return dataclasses.replace(e, x=_replace_reads(e.x, x, index, by))
    return e
