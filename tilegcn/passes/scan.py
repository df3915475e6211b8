"""Scan lowering: T.cumsum of a float32 shared buffer along one dimension.

The buffer (or the region at its origin that the op names) is seen as lines along the scanned dimension, numbered
row-major over the other dimensions. Thread t scans lines t, t + threads, ... one after the other: it reads a line's
n elements (in batches of READ_BATCH ds_reads in flight), adds them in order in fp32 (backwards for reverse) and
writes each running sum back. The elements of one line lie at constant strides from its first, so one address VGPR
serves the whole line. Along the last dimension the threads' lines lie a row apart: rows of a multiple of 32 words
would put every thread's j-th element in one LDS bank, so language/scan.py pads its staging buffer by a word a row.
No thread touches another's line, so the op needs one barrier before (after writes that filled the buffer, or
after reads its writes must not overtake) and leaves the LDS state 'any' (a barrier before whatever accesses LDS
next). Work: n dependent adds for a line of n elements; the lines run in parallel over the threads.
"""
from __future__ import annotations

import math

import sympy

from ..amdgcn.isa import VCC
from .context import Context, LaneMask
from .gemm import lds_barrier
from .layout import TID
from .lds_elements import _address as lds_address

READ_BATCH = 16  # ds_reads of one line in flight before their values are added


def _strides(buf) -> list:
    """Row-major element strides of `buf` (a padded staging buffer is wider than the scanned region)."""
    return [math.prod(buf.shape[d + 1:]) for d in range(len(buf.shape))]


def _line_address(ctx: Context, buf, line, shape, dim: int):
    """LDS byte address (SymPy in TID) of element 0 of line number `line` of the region `shape` of `buf`: the
    line's coordinates in the other dimensions, row-major over `shape`, times the buffer's own strides."""
    strides, index = _strides(buf), 0
    for d in reversed(range(len(shape))):
        if d != dim:
            index += (line % shape[d]) * strides[d]
            line = line // shape[d]
    return ctx.shared[buf] + index * 4


def _address(ctx: Context, address) -> tuple:
    """(VGPR, offset:) of byte address `address` (SymPy), its constant in the offset field as lds_elements puts it."""
    return lds_address(ctx, sympy.expand(address))


def _scan_line(ctx: Context, s, line):
    """The running sum of one line, element by element in scan order."""
    b, shape = ctx.b, s.shape()
    n = shape[s.dim]
    order = list(range(n))[::-1] if s.reverse else list(range(n))
    acc = b.v.alloc(what="running sum")
    src_base, dst_base = _line_address(ctx, s.src, line, shape, s.dim), _line_address(ctx, s.dst, line, shape, s.dim)
    src_step, dst_step = _strides(s.src)[s.dim] * 4, _strides(s.dst)[s.dim] * 4
    for start in range(0, n, READ_BATCH):
        batch = order[start:start + READ_BATCH]
        values = []
        for j in batch:
            v = b.v.alloc(what="line element")
            vaddr, imm = _address(ctx, src_base + j * src_step)
            b.emit("ds_read_b32", v, vaddr, suffix=imm, defs=(v,), uses=(vaddr,))
            values.append(v)
        for k, (j, v) in enumerate(zip(batch, values)):
            if start == 0 and k == 0:
                b.valu("v_mov_b32", acc, v)
            else:
                b.valu("v_add_f32", acc, acc, v)
            vaddr, imm = _address(ctx, dst_base + j * dst_step)
            b.emit("ds_write_b32", vaddr, acc, suffix=imm, defs=(), uses=(vaddr, acc), comment=f"prefix {j}")
            b.v.free(v)
    b.v.free(acc)


class _ThreadsBelow(LaneMask):
    """EXEC limited to the threads with id < `count` (the last round of lines, when lines % threads != 0)."""

    def __init__(self, ctx: Context, count: int | None):
        super().__init__(ctx)
        self.count = count

    def needed(self) -> bool:
        return self.count is not None

    def set_vcc(self, b):
        b.emit("v_cmp_gt_u32", VCC, b.sgpr_constant(self.count), self.ctx.lower.vgpr(TID), defs=(VCC,),
               comment="a thread with a line this round?")


def lower_cumsum(ctx: Context, s):
    shape = s.shape()
    lines, threads = math.prod(shape) // shape[s.dim], ctx.threads
    # the scan both reads and writes: after earlier writes its reads wait, after earlier reads its writes do
    lds_barrier(ctx, "write" if ctx.lds_state == "read" else "read")
    for first in range(0, lines, threads):
        count = lines - first
        with _ThreadsBelow(ctx, count if count < threads else None):
            _scan_line(ctx, s, TID + first)
    ctx.lds_state = "any"
