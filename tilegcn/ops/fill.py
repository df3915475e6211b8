"""`T.fill(buf, value)` / `T.clear(buf)` of a fragment (passes/elementwise.py lowers it; a gemm accumulator filled
with an inline constant takes MFMAs) or of a shared buffer (a fragment filled, then copied into it:
passes/memspace.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import CompileError
from ..ir.nodes import FRAGMENT, SHARED, Buffer
from ..ir.ops import TileOp, register, whole
from ..passes.elementwise import lower_fill
from ..passes.memspace import stage_fill


@register
@dataclass(eq=False)
class Fill(TileOp):
    """Every element of fragment or shared buffer `buffer` = `value`."""

    opname: ClassVar[str] = "fill"
    buffer: Buffer
    value: float

    def print_to(self, out):
        out.line(f"fill {self.buffer.name} = {float(self.value)!r}")

    def verify(self, scope):
        if self.buffer.scope not in (FRAGMENT, SHARED):
            raise CompileError(f"T.fill/T.clear of {self.buffer.scope} buffer {self.buffer.name} is not supported; "
                               "fill a fragment or a shared buffer", location=self.loc)

    def writes(self):
        return (whole(self.buffer),)

    def staged(self, stager):
        """A shared buffer: a fragment of its shape filled, then copied into it (passes/memspace.py)."""
        return stage_fill(self, stager) if self.buffer.scope == SHARED else None

    def lower(self, ctx, lower_body):
        lower_fill(ctx, self)
