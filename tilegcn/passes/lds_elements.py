"""Copies between a shared buffer (not a T.gemm operand) and a fragment, run by run of the fragment's layout.

Input: a Copy shared -> fragment or fragment -> shared (passes/memspace.py stages T.Parallel's shared reads and
writes and the shared <-> global copies through these). Output: ds_read / ds_write at the LDS byte address of each
element, `shared offset + row-major index * element bytes` (a non-gemm shared buffer is stored row-major,
unswizzled; its rows 16 bytes further apart where passes/lds.py pads them against bank conflicts): 16, 8 or 4 bytes
at once where consecutive elements of the layout lie at consecutive addresses aligned to that width on every thread,
else one element (ds_read_u16 / ds_write_b16 for a lone 16-bit one); 16-bit values are converted from / to the
fragment's fp32 values, two a register, as passes/copy.py converts global ones.
Barriers: each copy calls passes/gemm.py's lds_barrier, so a read of LDS other threads wrote (and a write over LDS
other threads may still read) waits at an s_barrier first; the wait pass puts the counters before it.
Where the fragment's layout replicates an element (a row vector held by every lane of the row), only its writer
thread stores it (passes/copy.py's WriterMask), so each LDS element is written once.
"""
from __future__ import annotations

import math

import sympy

from ..amdgcn.addr import linear_form, split_const
from ..amdgcn.memory import pack_f32_pair, unpack_16bit_to_f32
from ..errors import CompileError
from ..ir import nodes as N
from .context import Context
from . import dtype_convert
from .copy import WriterMask, _by_writer, _convert_run, _converted, _store_element, _Temps, global_index
from .gemm import _lds_base, lds_barrier

READ_BATCH = 16  # elements whose ds_reads are in flight before their values are converted
DS_READ = {1: "ds_read_u8", 2: "ds_read_u16", 4: "ds_read_b32", 8: "ds_read_b64", 16: "ds_read_b128"}  # by bytes
DS_WRITE = {1: "ds_write_b8", 2: "ds_write_b16", 4: "ds_write_b32", 8: "ds_write_b64", 16: "ds_write_b128"}


def _classic(frag: N.Buffer, dtype) -> bool:
    """fp32 / 16-bit float elements into or out of a float fragment (converted as this file always did); the int and
    fp8 dtypes go through passes/dtype_convert.py."""
    return (dtype.is_16bit or dtype.name == "float32") and frag.dtype.is_float and not frag.dtype.is_fp8


def _address_expr(ctx: Context, region: N.Region, frag: N.Buffer, r: int):
    """The LDS byte address (SymPy) of the shared element that fragment element r maps to: the buffer's offset plus
    its row-major index (rows `ctx.lds_pitches` elements apart where they are padded) times the element bytes."""
    shared = region.buffer
    index = global_index(region, frag.shape, ctx.layouts[frag].coords(r, ctx.threads))
    if shared in ctx.gemm_operands:
        return _operand_address(ctx, shared, index)
    elems = sum(sympy.sympify(i) * st for i, st in zip(index, _strides(ctx, shared)))
    pad = ctx.lds_pitches.get(shared)
    if pad is not None and pad.rows > 1:  # a pad after every pad.rows rows (passes/lds.py, row padding)
        elems += pad.elems * sympy.floor(sympy.sympify(index[-2]) / pad.rows)
    return sympy.expand(ctx.shared[shared] + elems * shared.dtype.bytes)


def _operand_address(ctx: Context, shared: N.Buffer, index) -> object:
    """The LDS byte address of element `index` (row, col of the user's tile) of T.gemm operand tile `shared`, as its
    plan lays the tile out (passes/gemm_plan.py): LDS rows K-major, or the user's rows for a tile read transposed,
    their 16-byte chunks XOR-swizzled; a fragment written there feeds the gemm (TileLang's dequantize GEMMs)."""
    plan, operand = ctx.gemm_operands[shared]
    if plan.halves_swizzled(operand):
        raise CompileError(f"T.copy into {shared.name}, operand B of a T.gemm whose A is a fragment, on this arch: "
                           "its LDS tile also swaps 8-byte halves, which this copy does not do; give A as a shared "
                           "tile")
    # SymPy folds Mod(4 * Mod(tid, 8), 8) into 4 * Mod(tid, 8) (wrong for tid = 2): the swizzle is computed on
    # fresh symbols standing for the Mod / floor terms of the coordinates, which are put back after
    atoms = sorted({a for k in index[-2:] for a in sympy.sympify(k).atoms(sympy.Mod, sympy.floor)}, key=str)
    fresh = {a: sympy.Symbol(f"lds_term{n}", integer=True, nonnegative=True) for n, a in enumerate(atoms)}
    row, col = (sympy.sympify(k).xreplace(fresh) for k in index[-2:])
    if not plan.copied_as_stored(operand):
        row, col = col, row
    per_chunk = plan.elems_per_chunk
    chunk = sympy.floor(col / per_chunk)
    within = col - per_chunk * chunk
    base = _operand_base(ctx, plan, operand, shared)
    address = base + plan.lds_chunk_offset(operand, row, chunk) + within * shared.dtype.bytes
    return sympy.sympify(address).xreplace({s: a for a, s in fresh.items()})


def _operand_base(ctx: Context, plan, operand: str, shared: N.Buffer) -> int:
    """The LDS byte offset of stage 0 of gemm operand tile `shared` (the plan's offsets are from its own base)."""
    return _lds_base(ctx, plan, operand, shared, 0) + plan.operand_lds_offset(operand)


def _strides(ctx: Context, shared: N.Buffer) -> list:
    """Element strides of `shared`'s dims: row-major, a pad of `elems` after every `rows` rows where padded
    (ctx.lds_pitches: passes/lds.py's RowPadding; a pad every few rows is added by `_address_expr`)."""
    shape = list(shared.shape)
    pad = ctx.lds_pitches.get(shared)
    if pad is None or pad.rows == 1:
        if pad is not None:
            shape[-1] += pad.elems
        return [math.prod(shape[d + 1:]) for d in range(len(shape) - 1)] + [1]
    plane = shape[-2] * shape[-1] + shape[-2] // pad.rows * pad.elems  # one padded [rows, cols] matrix
    return [plane * math.prod(shape[d + 1:-2]) for d in range(len(shape) - 2)] + [shape[-1], 1]


def _address(ctx: Context, address) -> tuple:
    """(VGPR, offset:) of LDS byte address `address`, its constant in the instruction's offset field."""
    const, rest = split_const(address)
    limit = ctx.b.arch.ds_max_imm_offset + 1
    high, imm = divmod(const, limit)
    return ctx.lower.vgpr(rest + high * limit), f"offset:{imm}"


def _runs(ctx: Context, region: N.Region, frag: N.Buffer) -> list:
    """(first element r, elements, access bytes, address) of each LDS access of this thread: the widest of 16, 8, 4
    bytes where consecutive elements of the layout lie at consecutive addresses aligned to that width (on every
    thread: each term of the address is a multiple of it), else one element."""
    lay, es = ctx.layouts[frag], region.buffer.dtype.bytes
    address = [_address_expr(ctx, region, frag, r) for r in range(lay.elems)]
    runs, r = [], 0
    while r < lay.elems:
        per = 1 if isinstance(region, N.GatherRegion) else \
            next((w // es for w in (16, 8, 4) if w > es and _contiguous(address, r, w // es, es, w)), 1)
        runs.append((r, per, per * es, address[r]))
        r += per
    return runs


def _contiguous(address: list, r: int, per: int, es: int, width: int) -> bool:
    if r % per or r + per > len(address):
        return False
    if any(c % width for c in linear_form(address[r]).values()):
        return False
    return all(sympy.expand(address[r + k] - address[r]) == k * es for k in range(1, per))


def _batches(runs: list) -> list:
    batches: list = []
    for run in runs:
        if batches and sum(x[1] for x in batches[-1]) + run[1] <= READ_BATCH:
            batches[-1].append(run)
        else:
            batches.append([run])
    return batches


def lower_shared_to_fragment(ctx: Context, s) -> None:
    """Copy shared region `s.src` into fragment `s.dst`: reads issued in batches, then converted (fp32 elements
    into an fp32 fragment land in its registers directly)."""
    region, frag = s.src, s.dst.buffer
    lay, b, dtype = ctx.layouts[frag], ctx.b, region.buffer.dtype
    lds_barrier(ctx, "read")
    for batch in _batches(_runs(ctx, region, frag)):
        loaded = []
        for r, per, width, address in batch:
            dwords = max(width // 4, 1)
            dst = _in_place(lay, frag, dtype, r, per, dwords)
            if dst is None:
                dst = b.v.alloc(dwords, align=2 if dwords > 1 else 1)
                loaded.append((r, per, dst))
            vaddr, offset = _address(ctx, address)
            b.emit(DS_READ[width], dst, vaddr, suffix=offset,
                   comment=f"{region.buffer.name} -> {frag.name}[{r}:{r + per}]")
        for r, per, dst in loaded:
            if not _classic(frag, dtype):
                with _Temps(b) as alloc:
                    for e in range(per):
                        value = dtype_convert.extract(b, alloc, dst, e, dtype)
                        _store_element(ctx, frag, r + e, _converted(b, alloc, value, dtype, frag.dtype))
                b.v.free(dst)
                continue
            for e in range(per):
                word = dst[e * dtype.bytes // 4]
                if dtype.is_16bit:
                    value = b.v.alloc()
                    unpack_16bit_to_f32(b, value, word, e % 2 == 1, dtype)
                    _store_element(ctx, frag, r + e, value)
                    b.v.free(value)
                else:
                    _store_element(ctx, frag, r + e, word)
            b.v.free(dst)


def lower_fragment_to_shared(ctx: Context, s) -> None:
    """Copy fragment `s.src` into shared region `s.dst`, each element by its writer thread (16-bit values packed
    in pairs, as passes/copy.py stores them to global memory)."""
    frag, region = s.src.buffer, s.dst
    lay, b, dtype = ctx.layouts[frag], ctx.b, region.buffer.dtype
    lds_barrier(ctx, "write")
    runs = _runs(ctx, region, frag)
    addresses = {r: address for r, _, _, address in runs}
    pieces = [(r, per, width) for r, per, width, _ in runs]
    for writer, group in _by_writer(lay, pieces):
        with WriterMask(ctx, writer):
            for r, per, width in group:
                dwords = max(width // 4, 1)
                data = _in_place(lay, frag, dtype, r, per, dwords)
                temp = data is None
                if temp:
                    data = b.v.alloc(dwords, align=2 if dwords > 1 else 1)
                    _pack(ctx, frag, r, per, data, dtype)
                vaddr, offset = _address(ctx, addresses[r])
                b.emit(DS_WRITE[width], vaddr, data, suffix=offset, comment=f"{frag.name}[{r}:{r + per}] -> "
                       f"{region.buffer.name}")
                if temp:
                    b.v.free(data)


def _in_place(lay, frag: N.Buffer, dtype, r: int, per: int, dwords: int):
    """The fragment's own registers holding elements r..r+per exactly as LDS holds them (fp32 values one a register;
    a 16-bit fragment of the shared buffer's dtype: two a register, low first, from an even element), or None where
    the values must be converted (through temporaries)."""
    if lay.regs.file != "v":
        return None
    if not lay.packed and dtype.bytes == 4 and (frag.dtype == dtype or _classic(frag, dtype)):
        return lay.regs[r:r + dwords]  # an int32 / fp32 value as it is (another 4-byte dtype converts)
    if lay.packed and frag.dtype == dtype and r % 2 == 0 and per % 2 == 0:
        return lay.regs[r // 2:r // 2 + dwords]
    return None


def _pack(ctx: Context, frag: N.Buffer, r: int, per: int, dst, dtype) -> None:
    """Elements r..r+per of fragment `frag` as `dtype` in the registers `dst` (16-bit: two a register, low first)."""
    b = ctx.b
    if not _classic(frag, dtype):
        _convert_run(ctx, frag, r, per, dst, dtype)
        return
    step = 2 if dtype.is_16bit else 1
    for e in range(0, per, step):
        lo, lo_temp = ctx.read_f32(frag, r + e)
        if dtype.is_16bit:
            hi, hi_temp = ctx.read_f32(frag, r + e + 1) if e + 1 < per else (None, False)
            pack_f32_pair(b, dst[e // 2], lo, hi, dtype)
            if hi_temp:
                b.v.free(hi)
        else:
            b.emit("v_mov_b32", dst[e], lo)
        if lo_temp:
            b.v.free(lo)
