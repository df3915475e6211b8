"""A global -> shared copy into one pipeline stage, in flight until a `wait_group` retires its group. Made by the
software pipeliner (passes/pipelining.py) from the T.copy of a T.Pipelined body; lowered by passes/gemm.py as LDS
DMA or register-staged copies."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir.ops import register
from ..passes.gemm import lower_async_copy
from .copy import Copy


@register
@dataclass(eq=False)
class AsyncCopy(Copy):
    """A global -> shared copy into pipeline stage `stage` of its shared buffer. `live` = (expr, n): where
    expr >= n (a K tile past the end, in a loop's last trip) the copy is issued with nothing in range: it reads no
    memory and lands zeros in a stage nothing reads, so the loop keeps one body and exact wait counts
    (passes/pipelining.py, masked tail)."""

    opname: ClassVar[str] = "async_copy"
    stage: int = 0
    live: tuple | None = None

    def print_to(self, out):
        live = f" while {out.index(self.live[0])} < {self.live[1]}" if self.live else ""
        out.line(f"async_copy {out.region(self.src)} -> {out.region(self.dst)} stage={self.stage}{live}")

    def stage_writes(self):
        return ((self.dst.buffer, self.stage),)

    def in_pipeline(self, ctx):
        return True

    def lower(self, ctx, lower_body):
        lower_async_copy(ctx, self)
