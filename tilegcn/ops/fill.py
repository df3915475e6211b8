"""`T.fill(buf, value)` / `T.clear(buf)` of a fragment (passes/elementwise.py lowers it; a gemm accumulator filled
with an inline constant takes MFMAs)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import CompileError
from ..ir.nodes import FRAGMENT, Buffer
from ..ir.ops import TileOp, register, whole
from ..passes.elementwise import lower_fill


@register
@dataclass(eq=False)
class Fill(TileOp):
    """Every element of fragment `buffer` = `value`."""

    opname: ClassVar[str] = "fill"
    buffer: Buffer
    value: float

    def print_to(self, out):
        out.line(f"fill {self.buffer.name} = {float(self.value)!r}")

    def verify(self, scope):
        if self.buffer.scope != FRAGMENT:
            raise CompileError(f"T.fill/T.clear of {self.buffer.scope} buffer {self.buffer.name} is not supported; "
                               "fill a fragment", location=self.loc)

    def writes(self):
        return (whole(self.buffer),)

    def lower(self, ctx, lower_body):
        lower_fill(ctx, self)
