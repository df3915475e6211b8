"""`if cond: ... else: ...` on a device value (a block id, a loop variable, a runtime int scalar): the If op.

The tracer records both branches (language/flow.py rewrites the kernel function's `if` statements); the device
takes one. The condition is uniform over the workgroup, so it lowers to a scalar branch (passes/control.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..ir import nodes as N
from ..ir.ops import TileOp, register
from ..passes.control import lower_if


@register
@dataclass(eq=False)
class If(TileOp):
    """if condition: then_body else: else_body (else_body may be empty)."""

    opname: ClassVar[str] = "if"
    condition: N.Condition
    then_body: list
    else_body: list

    def print_to(self, out):
        out.line(f"if {self.condition.text()}:")
        out.body(self.then_body)
        if self.else_body:
            out.line("else:")
            out.body(self.else_body)

    def bodies(self):
        return (self.then_body, self.else_body)

    def with_bodies(self, bodies):
        then_body, else_body = bodies
        return dataclasses.replace(self, then_body=then_body, else_body=else_body)

    def lower(self, ctx, lower_body):
        lower_if(ctx, self, lower_body)
