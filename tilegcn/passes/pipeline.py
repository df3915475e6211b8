"""Loop lowering: `for k in T.Pipelined(n, ...)` (or a steady-state loop of passes/pipelining.py) as a counted
scalar loop.

Input: a Loop statement. Output: `s_mov k, 0; L: body; k += 1; if k < n goto L`, the body lowered in its own
builder frame so loop-invariant address math is emitted before the loop. A pipelined body is lowered once for
every trip: when an LDS stage read at the end of a trip is written before the body's first barrier (the next
trip's first copy), an s_barrier goes at the loop head (write after read across the back-edge).
"""
from __future__ import annotations

import itertools

from ..amdgcn import isa
from ..amdgcn.isa import Inst
from ..ir import nodes as N
from .context import Context


def _enter_loop_lds_state(ctx: Context, body: list):
    """The LDS state (passes/gemm.py lds_barrier) at the loop head, which every trip's first LDS access sees: in a
    pipelined loop the previous trip's reads precede this trip's stage writes; a serial loop writing shared memory
    may follow the previous trip's reads or writes ("any": element access, passes/memspace.py); one only reading it
    keeps the state from before the loop (reads of what was written there wait at a barrier)."""
    kinds = {kind for x in N.walk(body) for kind, regions in (("read", x.reads()), ("write", x.writes()))
             for r in regions if r.buffer.scope == N.SHARED}
    if any(x in ctx.reduce_scratch for x in N.walk(body)):  # a reduction writes, then reads, its cross-wave partials
        kinds |= {"read", "write"}
    if kinds and ctx.pipe is not None:
        ctx.lds_state = "read"
    elif "write" in kinds:
        ctx.lds_state = "any"


def lower_loop(ctx: Context, s, lower_body):
    """`s`: a Loop op (tilegcn/ops/loop.py); `lower_body(ctx, stmts)` lowers its body."""
    b = ctx.b
    counter = b.s.alloc(what=f"loop counter {s.var}")
    b.emit("s_mov_b32", counter, 0, comment=f"{s.var} = 0")
    head = b.label("loop")
    _enter_loop_lds_state(ctx, s.body)
    ctx.access.loop_ranges[s.var] = (0, max(s.extent - 1, 0))
    with b.loop_frame(s.var, counter) as frame:
        frame.insts.append(Inst(head, kind=isa.LABEL))
        lower_pipelined_body(ctx, s.body, lower_body, frame)
        b.emit("s_add_u32", counter, counter, 1)
        b.emit("s_cmp_lt_u32", counter, s.extent, defs=(), uses=(counter,))
        b.emit("s_cbranch_scc1", head)
    b.frames[-1].insts.extend(frame.insts)


def lower_pipelined_body(ctx: Context, body: list, lower_body, frame):
    """Lower a loop's `body` into `frame` (after its head label); in a pipelined loop, an s_barrier goes at the head
    when an LDS stage read at the end of a trip is written before the body's first barrier (the next trip's first
    copy: write after read across the back-edge)."""
    pipe = ctx.pipe
    if pipe is None:
        lower_body(ctx, body)
        return
    outer_writes, pipe.loop_writes = pipe.loop_writes, []
    first = len(frame.insts)
    lower_body(ctx, body)
    before_barrier = set(itertools.takewhile(lambda key: key is not None, pipe.loop_writes))
    if before_barrier & pipe.reads:
        frame.insts.insert(first, Inst("s_barrier", kind=isa.BARRIER,
                                       comment="LDS stage write after the previous trip's reads"))
    pipe.loop_writes = outer_writes
