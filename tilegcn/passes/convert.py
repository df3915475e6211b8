"""Layout conversion: dst = src between fragments of one shape whose layouts differ (ops/convert_layout.py).

Input: a convert_layout op inserted by layout inference, its scratch buffer's LDS offset. Output: every element of
src written to the scratch as fp32 at its row-major offset, once (by its writer thread: replicated layouts switch
the other threads off), an s_barrier, then every thread reads the elements dst's layout gives it. An s_barrier
before the writes orders them after earlier reads of the same scratch (a conversion inside a loop). Without a
scratch (every thread already holds its dst elements in src: layout inference decided) it is register moves.
"""
from __future__ import annotations

import sympy

from ..amdgcn.addr import split_const
from ..ir import nodes as N
from ..amdgcn.isa import VCC
from ..ir.layout import in_thread_sources
from .context import Context
from .copy import WriterMask, _by_writer, _store_elements

BYTES = 4  # the scratch holds fp32 values


def _lds_address(ctx: Context, buf: N.Buffer, index: tuple, base: int):
    """(VGPR address, immediate offset) of element `index` of the scratch (row-major fp32 at LDS byte `base`)."""
    flat = sympy.Integer(0)
    for i, stride in zip(index, buf.strides):
        flat += sympy.sympify(i) * stride
    const, rest = split_const(sympy.expand(flat * BYTES))
    offset = base + const
    if rest == 0 or offset > ctx.b.arch.ds_max_imm_offset:
        return ctx.lower.vgpr(rest + offset), 0
    return ctx.lower.vgpr(rest), offset


def lower_layout_convert(ctx: Context, s):
    """`s`: the convert_layout op (ops/convert_layout.py)."""
    b = ctx.b
    src, dst = ctx.layouts[s.src], ctx.layouts[s.dst]
    if s.scratch is None:
        _in_registers(ctx, s, in_thread_sources(src.layout, dst.layout))
        return
    base = ctx.shared[s.scratch]
    b.emit("s_barrier", comment=f"{s.scratch.name}: earlier reads of the conversion scratch are done")
    pieces = [(r, 1, BYTES) for r in range(src.elems)]
    for writer, group in _by_writer(src, pieces):
        with WriterMask(ctx, writer):
            for r, _, _ in group:
                value, temp = ctx.read_f32(s.src, r)
                addr, offset = _lds_address(ctx, s.scratch, src.coords(r, ctx.threads), base)
                b.emit("ds_write_b32", addr, value, suffix=f"offset:{offset}",
                       comment=f"{s.src.name}[{r}] ({src.layout.describe()})")
                if temp:
                    b.v.free(value)
    b.emit("s_barrier", comment=f"{s.scratch.name} written: {s.dst.name} may read it")
    step = 2 if dst.packed else 1
    for r in range(0, dst.elems, step):
        values = []
        for e in range(r, min(r + step, dst.elems)):
            addr, offset = _lds_address(ctx, s.scratch, dst.coords(e, ctx.threads), base)
            value = b.v.alloc()
            b.emit("ds_read_b32", value, addr, suffix=f"offset:{offset}",
                   comment=f"{s.dst.name}[{e}] ({dst.layout.describe()})")
            values.append(value)
        _store_elements(ctx, s.dst, r, values)
        for v in values:
            b.v.free(v)
    ctx.lds_state = "read"


def _in_registers(ctx: Context, s, sources: tuple):
    """Each register of dst takes the src register holding its element on this thread: one move, or, where that
    register depends on the thread (a replicated src), a v_cndmask chain over the few it can be, selected by the
    element's index."""
    dst = ctx.layouts[s.dst]
    step = 2 if dst.packed else 1
    for r in range(0, dst.elems, step):
        values, temps = [], []
        for e in range(r, min(r + step, dst.elems)):
            value, owned = _pick(ctx, s.src, *sources[e])
            values.append(value)
            temps += owned
        _store_elements(ctx, s.dst, r, values)
        for v in temps:
            ctx.b.v.free(v)


def _pick(ctx: Context, src: N.Buffer, flat, registers: dict) -> tuple:
    """(fp32 VGPR with src's register registers[flat(tid)], the temporaries to free)."""
    b, owned = ctx.b, []

    def read(reg):
        value, temp = ctx.read_f32(src, reg)
        if temp:
            owned.append(value)
        return value

    options = sorted(registers)
    if len(options) == 1:
        return read(registers[options[0]]), owned
    index = ctx.lower.vgpr(flat)
    out = b.v.alloc(what="selected element")
    b.emit("v_mov_b32", out, read(registers[options[0]]))
    for f in options[1:]:
        b.emit("v_cmp_eq_u32", VCC, f, index, defs=(VCC,), comment=f"element {f} on this thread?")
        b.emit("v_cndmask_b32", out, out, read(registers[f]), VCC)
    return out, owned + [out]
