"""`for k in T.serial(start, stop, step)` / `range(...)` whose bounds only the device knows (a runtime scalar, a
block id, `T.min(T.ceildiv(K, 32), n)`): the DeviceLoop op, a counted scalar loop that may run no trip."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy

from ..ir import nodes as N
from ..ir.ops import OneBody, TileOp, register
from ..passes.control import lower_device_loop, lower_loop_exit


@register
@dataclass(eq=False)
class DeviceLoop(OneBody, TileOp):
    """for var in range(start, stop, step): body, with start and stop SymPy index expressions evaluated once on the
    device before the first trip; step a positive int. The body sees `var` itself (start, start + step, ...).
    `num_stages` > 1 (T.Pipelined with a device bound): the software pipeliner (passes/pipelining.py) rewrites a
    loop of step 1 whose body it can pipeline; any other runs serially."""

    opname: ClassVar[str] = "serial"
    var: sympy.Symbol
    start: object
    stop: object
    step: int
    body: list
    num_stages: int = 1

    def print_to(self, out):
        step = f", {self.step}" if self.step != 1 else ""
        if self.num_stages > 1:
            out.line(f"for {self.var} in pipelined({self.start}, {self.stop}{step}, num_stages={self.num_stages}):")
        else:
            out.line(f"for {self.var} in serial({self.start}, {self.stop}{step}):")
        out.body(self.body)

    def pipeline_stages(self):
        return self.num_stages if self.step == 1 else 1

    def in_pipeline(self, ctx):
        """The steady loop of a pipelined device loop issues async copies (in its steps' branches too)."""
        return any(x.stage_writes() for x in N.walk(self.body))

    def lower(self, ctx, lower_body):
        lower_device_loop(ctx, self, lower_body)


@register
@dataclass(eq=False)
class LoopExit(TileOp):
    """Leave the innermost device loop unless `condition` holds (the software pipeliner's trips of S steps end
    where the steps run out, passes/pipelining.py `_pipeline_on_device`); the statements after it run only where
    it holds."""

    opname: ClassVar[str] = "loop_exit"
    condition: N.Condition

    def print_to(self, out):
        out.line(f"exit loop unless {self.condition.text()}")

    def lower(self, ctx, lower_body):
        lower_loop_exit(ctx, self)
