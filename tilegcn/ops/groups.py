"""Async-copy groups of a pipelined K loop (passes/pipelining.py): `commit_group` closes a group, `wait_group n`
waits until at most n groups are in flight. Lowered by passes/gemm.py to exact `s_waitcnt` + `s_barrier`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir.ops import TileOp, register
from ..passes.gemm import lower_commit_group, lower_wait_group, lower_wave_group_barrier


@register
@dataclass(eq=False)
class CommitGroup(TileOp):
    """Close the group of async copies issued since the previous commit."""

    opname: ClassVar[str] = "commit_group"

    def print_to(self, out):
        out.line("commit_group")

    def in_pipeline(self, ctx):
        return True

    def lower(self, ctx, lower_body):
        lower_commit_group(ctx, self)


@register
@dataclass(eq=False)
class WaitGroup(TileOp):
    """Wait until at most `pending` committed groups (the newest) are in flight; the copies of the older groups
    are then visible to every thread of the workgroup."""

    opname: ClassVar[str] = "wait_group"
    pending: int
    sync: bool = False  # end in an s_barrier even where no group retires (a ping-pong loop counts its barriers)

    def print_to(self, out):
        out.line(f"wait_group {self.pending}" + (" sync" if self.sync else ""))

    def in_pipeline(self, ctx):
        return True

    def lower(self, ctx, lower_body):
        lower_wait_group(ctx, self)


@register
@dataclass(eq=False)
class WaveGroupBarrier(TileOp):
    """A barrier of a ping-pong K loop (passes/pipelining.py): `group` None, every wave's; `group` g, only wave group
    g's (the first or second half of the workgroup's waves), which runs the two groups half a K step apart."""

    opname: ClassVar[str] = "wave_group_barrier"
    group: int | None = None

    def print_to(self, out):
        out.line("wave_group_barrier" + ("" if self.group is None else f" group={self.group}"))

    def in_pipeline(self, ctx):
        return True

    def lower(self, ctx, lower_body):
        lower_wave_group_barrier(ctx, self)
