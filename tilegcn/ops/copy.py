"""`T.copy(src, dst)`: a tile moved between global memory, shared memory and fragments (passes/copy.py lowers it;
copies into shared memory outside a pipelined loop go through passes/gemm.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir.nodes import FRAGMENT, GLOBAL, SHARED, Region
from ..ir.layout import Same, Vector
from ..ir.ops import LOAD, TileOp, register
from ..passes.copy import lower_copy
from ..passes.memspace import stage_copy
from .convert_layout import ConvertLayout


@register
@dataclass(eq=False)
class Copy(TileOp):
    """Copy region `src` to region `dst` (of equal extents, leading 1s aside); also what T.print records (the
    fragment into its hidden output tensor)."""

    opname: ClassVar[str] = "copy"
    src: Region
    dst: Region

    def print_to(self, out):
        out.line(f"copy {out.region(self.src)} -> {out.region(self.dst)}")

    def verify(self, scope):
        scope.check_region_bounds(self.src, self.loc)
        scope.check_region_bounds(self.dst, self.loc)

    def reads(self):
        return (self.src,)

    def writes(self):
        return (self.dst,)

    def layout_constraints(self, gemm_plans, threads):
        """Fragment to fragment: one layout (element r to element r); to or from global memory: the fragment is
        moved in vectors of the global tensor's elements."""
        src, dst = self.src.buffer, self.dst.buffer
        if src.scope == dst.scope == FRAGMENT:
            return (Same(src, dst, self),)
        if GLOBAL in (src.scope, dst.scope) and FRAGMENT in (src.scope, dst.scope):
            frag, other = (src, dst) if src.scope == FRAGMENT else (dst, src)
            return (Vector(frag, other.dtype.bytes),)
        return ()

    def converted(self, rule, fresh):
        """A fragment copy between two layouts is a layout conversion."""
        if self.src.buffer.scope == self.dst.buffer.scope == FRAGMENT:
            _, scratch = fresh(self.src.buffer)
            return [ConvertLayout(self.src.buffer, self.dst.buffer, scratch, loc=self.loc)]
        return None

    def staged(self, stager):
        """Global <-> shared and shared -> shared (not into a T.gemm operand): through a staging fragment
        (passes/memspace.py)."""
        return stage_copy(self, stager)

    def k_loop_role(self):
        return LOAD if (self.src.buffer.scope, self.dst.buffer.scope) == (GLOBAL, SHARED) else None

    def lower(self, ctx, lower_body):
        lower_copy(ctx, self)
