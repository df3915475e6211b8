"""A one-element variable's value used as an index (`A[pid_m * 16, 0]` with `pid_m = v[0] // 4`, a device trip
count `T.Pipelined(end[0] - start[0])`, TileLang's `cur = v` of a `local.var`): the LetIndex op, which reads the
variable into an index symbol."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy

from ..ir import nodes as N
from ..ir.layout import Whole
from ..ir.ops import TileOp, register, whole
from ..passes.control import lower_let_index


@register
@dataclass(eq=False)
class LetIndex(TileOp):
    """var = value: an int element expression of one-element variables (which every thread holds alike), read at
    this point of the program into an SGPR that later index expressions name as `var`."""

    opname: ClassVar[str] = "let"
    allowed_in_parallel: ClassVar[bool] = True  # a variable read inside T.Parallel is read before the loop
    var: sympy.Symbol
    value: N.Expr

    def print_to(self, out):
        out.line(f"let {self.var} = {out.expr(self.value)}")

    def reads(self):
        return tuple(whole(e.buffer) for e in N.walk_expr(self.value) if isinstance(e, N.ElemRef))

    def layout_constraints(self, gemm_plans, threads):
        """Every thread holds the variables it reads (the value is the same on every lane; the first lane's is read)."""
        return tuple(Whole(r.buffer, self) for r in self.reads())

    def lower(self, ctx, lower_body):
        lower_let_index(ctx, self)
