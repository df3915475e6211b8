"""`T.reduce_sum / reduce_max / reduce_min / reduce_absmax / reduce_abssum(src, dst, dim, clear)`: a fragment reduced
along one dimension into a smaller fragment (passes/reduce.py plans and lowers it: in-thread, across lanes by
passes/xlane.py's primitives, across waves through LDS scratch; its destination's layout is the slice of the
source's, passes/layout_inference.py)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..errors import CompileError
from ..ir.nodes import FRAGMENT, Buffer
from ..ir.layout import SliceOf
from ..ir.ops import TileOp, register, whole
from ..passes.reduce import lower_reduce
from .convert_layout import ConvertLayout

REDUCE_OPS = ("sum", "max", "min", "absmax", "abssum")


@register
@dataclass(eq=False)
class Reduce(TileOp):
    """dst = op over dim `dim` of src; with clear=False the old dst is combined in (dst + sum, max(dst, max), ...).
    `dst` has src's shape without `dim` (or with it as 1)."""

    opname: ClassVar[str] = "reduce"
    op: str  # one of REDUCE_OPS
    src: Buffer
    dst: Buffer
    dim: int  # non-negative
    clear: bool = True

    def print_to(self, out):
        out.line(f"reduce_{self.op} {self.src.name} dim={self.dim} -> {self.dst.name}"
                 + ("" if self.clear else " (accumulate)"))

    def verify(self, scope):
        if self.op not in REDUCE_OPS:
            raise CompileError(f"unknown reduction {self.op!r}: one of {', '.join(REDUCE_OPS)}", location=self.loc)
        for buf in (self.src, self.dst):
            if buf.scope != FRAGMENT:
                raise CompileError(f"T.reduce_{self.op} reduces fragments, {buf.name} is a {buf.scope} buffer",
                                   location=self.loc)

    def reads(self):
        return (whole(self.src),) if self.clear else (whole(self.src), whole(self.dst))

    def writes(self):
        return (whole(self.dst),)

    def layout_constraints(self, gemm_plans, threads):
        """The destination takes the slice of the source's layout along `dim`: each thread keeps the outputs of
        the rows it holds, so the reduction needs no data from threads outside the ones sharing a row."""
        keepdims = len(self.dst.shape) == len(self.src.shape)
        return (SliceOf(self.dst, self.src, (self.dim,), self, keepdims=keepdims),)

    def converted(self, rule, fresh):
        """Where the destination's other uses want another layout: reduce into a fragment of the slice layout,
        then convert it into the destination (with clear=False, the old destination converted in first)."""
        tmp, scratch = fresh(self.dst)
        out = [dataclasses.replace(self, dst=tmp),
               ConvertLayout(tmp, self.dst, scratch, loc=self.loc)]
        if not self.clear:
            _, scratch_in = fresh(self.dst)
            out.insert(0, ConvertLayout(self.dst, tmp, scratch_in, loc=self.loc))
        return out

    def lower(self, ctx, lower_body):
        lower_reduce(ctx, self)
