"""`for k in T.Pipelined(n, num_stages=S)`: a counted loop; with S > 1 and a body of global -> shared copies and
gemms the software pipeliner (passes/pipelining.py) rewrites it, else it runs serially (passes/pipeline.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy

from ..ir.ops import OneBody, TileOp, register
from ..passes.pipeline import lower_loop


@register
@dataclass(eq=False)
class Loop(OneBody, TileOp):
    """for var in range(extent): body, with `num_stages` pipeline stages asked for."""

    opname: ClassVar[str] = "for"
    var: sympy.Symbol
    extent: int
    num_stages: int
    body: list
    ping_pong: bool | None = None  # T.Pipelined(annotations={"ping_pong": ...}); None: the pipeliner decides

    def print_to(self, out):
        pp = "" if self.ping_pong is None else f", ping_pong={self.ping_pong}"
        out.line(f"for {self.var} in pipelined({self.extent}, num_stages={self.num_stages}{pp}):")
        out.body(self.body)

    def pipeline_stages(self):
        return self.num_stages

    def in_pipeline(self, ctx):
        """A loop of a pipelined K loop issues async copies (its steady part)."""
        return any(s.stage_writes() for s in self.body)

    def lower(self, ctx, lower_body):
        lower_loop(ctx, self, lower_body)
