"""`convert_layout src -> dst via scratch`: a fragment copied into another layout, through LDS. Layout inference
(passes/layout_inference.py) inserts it where two uses of a fragment disagree; passes/convert.py lowers it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir.nodes import Buffer
from ..ir.ops import TileOp, register, whole
from ..passes.convert import lower_layout_convert


@register
@dataclass(eq=False)
class ConvertLayout(TileOp):
    """dst = src, fragments of one shape and different layouts: every element of src enters the LDS buffer
    `scratch` once (from its writer thread), and after a barrier every thread reads the elements dst's layout
    gives it; `scratch` is None where each thread already holds its dst elements in src (register moves). The two
    layouts are independent (the op states no constraint between them)."""

    opname: ClassVar[str] = "convert_layout"
    src: Buffer
    dst: Buffer
    scratch: Buffer | None

    def print_to(self, out):
        via = self.scratch.name if self.scratch is not None else "registers"
        out.line(f"convert_layout {self.src.name} -> {self.dst.name} via {via}")

    def reads(self):
        return (whole(self.src),)

    def writes(self):
        return (whole(self.dst),) + ((whole(self.scratch),) if self.scratch is not None else ())

    def lower(self, ctx, lower_body):
        lower_layout_convert(ctx, self)
