"""`for idx in T.Parallel(extents): buffer[idx] = value`: an element expression stored into a fragment
(passes/elementwise.py lowers it, element by element of the fragment's layout)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import CompileError
from ..ir.nodes import FRAGMENT, Buffer, ElemRef, Expr, walk_expr
from ..ir.ops import TileOp, register, whole
from ..passes.elementwise import lower_parallel
from ..passes.memspace import stage_parallel


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

    def layout_links(self):
        """Each fragment read shares the stored fragment's layout: element k of every one is in one thread's
        registers. (Reads at other indices than the loop's, broadcasts, need layouts other than one shared one.)"""
        links = []
        for ref in self._element_refs():
            if ref.buffer.scope != FRAGMENT:
                continue
            if tuple(ref.buffer.shape) != tuple(self.buffer.shape):
                raise CompileError(f"fragments {ref.buffer.name}{list(ref.buffer.shape)} and "
                                   f"{self.buffer.name}{list(self.buffer.shape)} in one T.Parallel "
                                   "must have the same shape", location=self.loc)
            links.append((ref.buffer, self.buffer))
        return tuple(links)

    def lower(self, ctx, lower_body):
        lower_parallel(ctx, self)
