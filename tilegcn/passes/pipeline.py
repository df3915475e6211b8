"""Loop lowering: `for k in T.Pipelined(n, num_stages)` as a counted scalar loop.

Input: a Loop statement. Output: `s_mov k, 0; L: body; k += 1; if k < n goto L`, the body lowered in
its own builder frame so loop-invariant address math is emitted before the loop.
num_stages > 1 is accepted and currently runs serially (one stage); multi-stage software pipelining
with LDS DMA is a later pass.
"""
from __future__ import annotations

from ..amdgcn import isa
from ..amdgcn.isa import Inst
from ..ir import nodes as N
from .context import Context


def lower_loop(ctx: Context, s: N.Loop, lower_body):
    b = ctx.b
    counter = b.s.alloc(what=f"loop counter {s.var}")
    b.emit("s_mov_b32", counter, 0, comment=f"{s.var} = 0")
    head = b.label("loop")
    if any(isinstance(x, N.Gemm) or (isinstance(x, N.Copy) and x.dst.buffer.scope == N.SHARED)
           for x in N.walk(s.body)):
        ctx.lds_state = "read"  # the previous iteration's reads precede this iteration's writes
    with b.loop_frame(s.var, counter) as frame:
        frame.insts.append(Inst(head, kind=isa.LABEL))
        lower_body(ctx, s.body)
        b.emit("s_add_u32", counter, counter, 1)
        b.emit("s_cmp_lt_u32", counter, s.extent, defs=(), uses=(counter,))
        b.emit("s_cbranch_scc1", head)
    b.frames[-1].insts.extend(frame.insts)
