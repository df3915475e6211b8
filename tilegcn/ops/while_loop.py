"""`while v[0] < n:` on a variable the device updates (T.alloc_var, a one-element T.alloc_local): the While op."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import nodes as N
from ..ir.ops import OneBody, TileOp, register
from ..passes.control import lower_while


@register
@dataclass(eq=False)
class While(OneBody, TileOp):
    """while condition: body (the condition evaluated before every trip)."""

    opname: ClassVar[str] = "while"
    condition: N.Condition
    body: list

    def print_to(self, out):
        out.line(f"while {self.condition.text()}:")
        out.body(self.body)

    def lower(self, ctx, lower_body):
        lower_while(ctx, self, lower_body)
