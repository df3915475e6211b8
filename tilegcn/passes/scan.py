"""Scan lowering: T.cumsum of a float32 shared buffer along one dimension.

The buffer is seen as lines: (outer, n, inner) with n the scanned dimension, element (o, j, i) at row-major index
(o * n + j) * inner + i. Thread t scans lines t, t + threads, ... one after the other: it reads a line's n elements
(in batches of READ_BATCH ds_reads in flight), adds them in order in fp32 (backwards for reverse) and writes each
running sum back. The elements of one line lie at constant strides from its first, so one address VGPR serves
the whole line. No thread touches another's line, so the op needs one barrier before (the writes that filled
the buffer) and leaves the LDS state 'any' (a barrier before whatever accesses it next).
Work: n adds on the critical path of a line; lines run in parallel over the threads (TileLang's shared-memory
scan is serial per line as well when a line fits one thread's work).
"""
from __future__ import annotations

import math

import sympy

from ..amdgcn.isa import EXEC, VCC
from .context import Context
from .gemm import lds_barrier
from .layout import TID

READ_BATCH = 16  # ds_reads of one line in flight before their values are added


def _lines(shape, dim: int) -> tuple:
    """(outer, n, inner) of `shape` scanned along `dim`."""
    return math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])


def _line_address(ctx: Context, buf, line, n: int, inner: int):
    """LDS byte address (SymPy in TID) of element 0 of line number `line` of `buf`."""
    o, i = line // inner, line % inner
    return ctx.shared[buf] + (o * n * inner + i) * 4


def _address(ctx: Context, address) -> tuple:
    """(VGPR, offset:) of byte address `address` (SymPy), as lds_elements splits it."""
    from .lds_elements import _address as split
    return split(ctx, sympy.expand(address))


def _scan_line(ctx: Context, s, line, n: int, inner: int):
    """The running sum of one line, element by element in scan order."""
    b = ctx.b
    order = list(range(n))[::-1] if s.reverse else list(range(n))
    acc = b.v.alloc(what="running sum")
    src_base, dst_base = _line_address(ctx, s.src, line, n, inner), _line_address(ctx, s.dst, line, n, inner)
    for start in range(0, n, READ_BATCH):
        batch = order[start:start + READ_BATCH]
        values = []
        for j in batch:
            v = b.v.alloc(what="line element")
            vaddr, imm = _address(ctx, src_base + j * inner * 4)
            b.emit("ds_read_b32", v, vaddr, suffix=imm, defs=(v,), uses=(vaddr,))
            values.append(v)
        for k, (j, v) in enumerate(zip(batch, values)):
            if start == 0 and k == 0:
                b.valu("v_mov_b32", acc, v)
            else:
                b.valu("v_add_f32", acc, acc, v)
            vaddr, imm = _address(ctx, dst_base + j * inner * 4)
            b.emit("ds_write_b32", vaddr, acc, suffix=imm, defs=(), uses=(vaddr, acc), comment=f"prefix {j}")
            b.v.free(v)
    b.v.free(acc)


class _ThreadsBelow:
    """EXEC limited to the threads with id < `count` (the last round of lines, when lines % threads != 0)."""

    def __init__(self, ctx: Context, count: int | None):
        self.ctx, self.count, self.saved = ctx, count, None

    def __enter__(self):
        if self.count is None:
            return self
        b = self.ctx.b
        b.emit("v_cmp_gt_u32", VCC, b.sgpr_constant(self.count), self.ctx.lower.vgpr(TID), defs=(VCC,),
               comment="a thread with a line this round?")
        self.saved = b.s.alloc(2, align=2, what="saved exec")
        b.emit("s_and_saveexec_b64", self.saved, VCC, defs=(self.saved, EXEC), uses=(VCC, EXEC))
        self.scope = b.lanes_masked()
        self.scope.__enter__()
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            self.scope.__exit__(*exc)
            self.ctx.b.emit("s_mov_b64", EXEC, self.saved, defs=(EXEC,), uses=(self.saved,))
            self.ctx.b.s.free(self.saved)


def lower_cumsum(ctx: Context, s):
    outer, n, inner = _lines(s.src.shape, s.dim)
    lines, threads = outer * inner, ctx.threads
    lds_barrier(ctx, "read")
    for first in range(0, lines, threads):
        count = lines - first
        with _ThreadsBelow(ctx, count if count < threads else None):
            _scan_line(ctx, s, TID + first, n, inner)
    ctx.lds_state = "any"
