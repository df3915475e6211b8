"""Copies between a shared buffer (not a T.gemm operand) and a fragment, element by element.

Input: a Copy shared -> fragment or fragment -> shared (passes/memspace.py stages T.Parallel's shared reads and
writes and the shared <-> global copies through these). Output: for each element r of the fragment's layout, one
ds_read / ds_write at the element's LDS byte address, `shared offset + row-major index * element bytes` (a non-gemm
shared buffer is stored row-major, unswizzled); 16-bit elements are read with ds_read_u16 and written with
ds_write_b16, converted from / to the fragment's fp32 values as passes/copy.py converts global ones.
Barriers: each copy calls passes/gemm.py's lds_barrier, so a read of LDS other threads wrote (and a write over LDS
other threads may still read) waits at an s_barrier first; the wait pass puts the counters before it.
Where the fragment's layout replicates an element (a row vector held by every lane of the row), only its writer
thread stores it (passes/copy.py's WriterMask), so each LDS element is written once.
"""
from __future__ import annotations

import math

import sympy

from ..amdgcn.addr import split_const
from ..amdgcn.memory import pack_f32_pair, unpack_16bit_to_f32
from ..ir import nodes as N
from .context import Context
from .copy import WriterMask, _by_writer, _store_element, global_index
from .gemm import lds_barrier

READ_BATCH = 16  # ds_reads in flight before their values are converted


def _address(ctx: Context, region: N.Region, frag: N.Buffer, r: int) -> tuple:
    """(VGPR, offset:) of the LDS byte address of the shared element that fragment element r maps to."""
    shared = region.buffer
    index = global_index(region, frag.shape, ctx.layouts[frag].coords(r, ctx.threads))
    strides = [math.prod(shared.shape[d + 1:]) for d in range(len(shared.shape))]
    linear = sum(sympy.sympify(i) * st for i, st in zip(index, strides))
    const, rest = split_const(sympy.expand(ctx.shared[shared] + linear * shared.dtype.bytes))
    high, imm = divmod(const, ctx.b.arch.ds_max_imm_offset + 1)
    return ctx.lower.vgpr(rest + high * (ctx.b.arch.ds_max_imm_offset + 1)), f"offset:{imm}"


def lower_shared_to_fragment(ctx: Context, s) -> None:
    """Copy shared region `s.src` into fragment `s.dst`: reads issued in batches, then converted."""
    region, frag = s.src, s.dst.buffer
    lay = ctx.layouts[frag]
    lds_barrier(ctx, "read")
    direct = lay.regs.file == "v" and not lay.packed
    for first in range(0, lay.elems, READ_BATCH):
        elements = range(first, min(first + READ_BATCH, lay.elems))
        loaded = [(r, _read(ctx, region, frag, r, lay.regs[r] if direct else ctx.b.v.alloc())) for r in elements]
        for r, reg in loaded:
            if region.buffer.dtype.is_16bit:
                unpack_16bit_to_f32(ctx.b, reg, reg, False, region.buffer.dtype)
            if not direct:
                _store_element(ctx, frag, r, reg)
                ctx.b.v.free(reg)


def _read(ctx: Context, region: N.Region, frag: N.Buffer, r: int, dst):
    vaddr, offset = _address(ctx, region, frag, r)
    op = "ds_read_u16" if region.buffer.dtype.is_16bit else "ds_read_b32"
    ctx.b.emit(op, dst, vaddr, suffix=offset, comment=f"{region.buffer.name} -> {frag.name}[{r}]")
    return dst


def lower_fragment_to_shared(ctx: Context, s) -> None:
    """Copy fragment `s.src` into shared region `s.dst`, each element by its writer thread."""
    frag, region = s.src.buffer, s.dst
    lay, b, dtype = ctx.layouts[frag], ctx.b, region.buffer.dtype
    lds_barrier(ctx, "write")
    pieces = [(r, 1, dtype.bytes) for r in range(lay.elems)]
    for writer, group in _by_writer(lay, pieces):
        with WriterMask(ctx, writer):
            for r, _, _ in group:
                value, temp = ctx.read_f32(frag, r)
                data = value
                if dtype.is_16bit:
                    data = b.v.alloc()
                    pack_f32_pair(b, data, value, None, dtype)
                vaddr, offset = _address(ctx, region, frag, r)
                b.emit("ds_write_b16" if dtype.is_16bit else "ds_write_b32", vaddr, data, suffix=offset,
                       comment=f"{frag.name}[{r}] -> {region.buffer.name}")
                if data is not value:
                    b.v.free(data)
                if temp:
                    b.v.free(value)
