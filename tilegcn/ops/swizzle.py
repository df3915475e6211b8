"""`T.use_swizzle(panel_size, num_xcds)`: the workgroup ids remapped in the kernel prologue (passes/xcd.py), before
any statement uses them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import CompileError
from ..ir.ops import TileOp, register
from ..passes.xcd import lower_swizzle


@register
@dataclass(eq=False)
class Swizzle(TileOp):
    """Remap workgroup ids: chunk workgroups per XCD, then rasterise in panels of `panel_size`."""

    opname: ClassVar[str] = "swizzle"
    panel_size: int
    num_xcds: int

    def print_to(self, out):
        out.line(f"swizzle panel_size={self.panel_size} num_xcds={self.num_xcds}")

    def verify(self, scope):
        if scope.depth:
            raise CompileError("T.use_swizzle must be at the top of the kernel body", location=self.loc)
        if scope.seen.get("swizzle"):
            raise CompileError("T.use_swizzle given twice", location=self.loc)
        if self.panel_size < 1 or self.num_xcds < 1:
            raise CompileError("T.use_swizzle panel_size and num_xcds must be positive", location=self.loc)
        scope.seen["swizzle"] = self

    def lower_prologue(self, ctx):
        lower_swizzle(ctx, self)

    def lower(self, ctx, lower_body):
        pass  # applied in the prologue
