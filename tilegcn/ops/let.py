"""`let s = v[0]`: the value a variable (T.alloc_var) holds at this point of the program, as an index symbol that
tile starts, loop bounds and index arithmetic may use (TileLang's `current = v` on a `local.var`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy

from ..ir.layout import Whole
from ..ir.nodes import Buffer
from ..ir.ops import TileOp, register, whole
from ..passes.control import lower_let


@register
@dataclass(eq=False)
class Let(TileOp):
    """symbol = var[0], read once here (later assignments to var leave symbol as it was)."""

    opname: ClassVar[str] = "let"
    symbol: sympy.Symbol
    var: Buffer

    def print_to(self, out):
        out.line(f"let {self.symbol} = {self.var.name}[0]")

    def reads(self):
        return (whole(self.var),)

    def writes(self):
        return ()

    def layout_constraints(self, gemm_plans, threads):
        """Every thread holds the variable (its value is the same on every lane, read from the first)."""
        return (Whole(self.var, self),)

    def lower(self, ctx, lower_body):
        lower_let(ctx, self)
