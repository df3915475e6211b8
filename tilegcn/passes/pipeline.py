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


def lower_loop(ctx: Context, s, lower_body):
    """`s`: a Loop op (tilegcn/ops/loop.py); `lower_body(ctx, stmts)` lowers its body."""
    b = ctx.b
    counter = b.s.alloc(what=f"loop counter {s.var}")
    b.emit("s_mov_b32", counter, 0, comment=f"{s.var} = 0")
    head = b.label("loop")
    shared = any(r.buffer.scope == N.SHARED for x in N.walk(s.body) for r in x.reads() + x.writes())
    if shared or any(x in ctx.reduce_scratch for x in N.walk(s.body)):
        # the previous iteration's reads precede this iteration's writes (a cross-wave reduction's LDS scratch
        # included: a reduction in a T.serial loop rewrites its partials while slower waves may still read them)
        ctx.lds_state = "read"
    pipe = ctx.pipe
    outer_writes = None
    if pipe is not None:
        outer_writes, pipe.loop_writes = pipe.loop_writes, []
    ctx.access.loop_ranges[s.var] = (0, max(s.extent - 1, 0))
    with b.loop_frame(s.var, counter) as frame:
        frame.insts.append(Inst(head, kind=isa.LABEL))
        first = len(frame.insts)
        lower_body(ctx, s.body)
        if pipe is not None:
            before_barrier = set(itertools.takewhile(lambda key: key is not None, pipe.loop_writes))
            if before_barrier & pipe.reads:
                frame.insts.insert(first, Inst("s_barrier", kind=isa.BARRIER,
                                               comment="LDS stage write after the previous trip's reads"))
            pipe.loop_writes = outer_writes
        b.emit("s_add_u32", counter, counter, 1)
        b.emit("s_cmp_lt_u32", counter, s.extent, defs=(), uses=(counter,))
        b.emit("s_cbranch_scc1", head)
    b.frames[-1].insts.extend(frame.insts)
