"""`T.cumsum` of a shared buffer: an inclusive running sum along one dimension (passes/scan.py lowers it: each thread
scans whole lines in LDS). A fragment's cumsum is staged through an fp32 shared buffer by language/scan.py, as
TileLang's `cumsum_fragment` stages it through shared memory."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import CompileError
from ..ir.nodes import SHARED, Buffer, Region
from ..ir.ops import TileOp, register, whole
from ..ir.types import float32
from ..passes.scan import lower_cumsum


@register
@dataclass(eq=False)
class Cumsum(TileOp):
    """dst = the inclusive prefix sum of src along `dim` (from the last element backwards when `reverse`); src and
    dst are float32 shared buffers of one shape (they may be the same buffer). With `extent`, the scan covers the
    region of that shape at the buffers' origin (a staging buffer padded by a word a row, passes/scan.py)."""

    opname: ClassVar[str] = "cumsum"
    src: Buffer
    dst: Buffer
    dim: int  # non-negative
    reverse: bool = False
    extent: tuple | None = None  # the scanned region's shape (default: the whole buffer)

    def shape(self) -> tuple:
        return tuple(self.extent or self.src.shape)

    def print_to(self, out):
        region = f"[{', '.join(f'0:{e}' for e in self.extent)}]" if self.extent else ""
        out.line(f"cumsum {self.src.name}{region} dim={self.dim} -> {self.dst.name}{region}"
                 + (" (reverse)" if self.reverse else ""))

    def verify(self, scope):
        for buf in (self.src, self.dst):
            if buf.scope != SHARED or buf.dtype != float32:
                raise CompileError(f"cumsum scans float32 shared buffers, {buf.name} is a {buf.dtype} {buf.scope} "
                                   "buffer", location=self.loc)
        if tuple(self.src.shape) != tuple(self.dst.shape) or \
                any(e > d for e, d in zip(self.shape(), self.src.shape)):
            raise CompileError(f"cumsum: {self.dst.name}{list(self.dst.shape)} is not shaped as "
                               f"{self.src.name}{list(self.src.shape)}", location=self.loc)

    def reads(self):
        return (self._region(self.src),)

    def writes(self):
        return (self._region(self.dst),)

    def _region(self, buf: Buffer) -> Region:
        return Region(buf, (0,) * len(buf.shape), self.shape()) if self.extent else whole(buf)

    def lower(self, ctx, lower_body):
        lower_cumsum(ctx, self)
