"""Atomic lowering: T.atomic_add / atomic_max / atomic_min of a fragment's elements into global or shared memory.

Input: an Atomic statement (ops/atomic.py) whose source fragment has a layout. Output: per element the thread holds
(its writer thread only, where the layout replicates it: each element is applied once), one atomic instruction at
the destination element's address, the value converted from the fragment's fp32:
  - global (buffer instructions, addressed and masked at ragged edges as passes/copy.py's stores: a lane outside the
    tensor gets an offset past NUM_RECORDS, and the hardware drops out-of-range atomics): fp32 add
    `buffer_atomic_add_f32`; 16-bit add `buffer_atomic_pk_add_f16` / `_bf16` (gfx950 only) on two neighbouring
    elements at once, or on one element with -0.0 in the other half (x + -0.0 == x for every x, -0.0 included);
    gfx942's bf16 add and 16-bit max / min, which have no instruction: a `buffer_atomic_cmpswap` loop (_cas_loop);
    int32 `buffer_atomic_add / smax / smin`;
  - shared: `ds_add_f32`, `ds_pk_add_f16 / bf16`, `ds_add_u32`, `ds_max_i32`, `ds_min_i32` (16-bit max / min: a
    `ds_cmpst_rtn_b32` loop) at the element's row-major LDS address (passes/lds_elements.py's), after a barrier
    where any LDS access came before.
fp32 max / min: neither arch has a float max / min atomic on global memory (llvm-mc-22 rejects
`buffer_atomic_max_f32` / `buffer_atomic_fmax` for gfx942 and gfx950; llc-22 lowers `atomicrmw fmax float` to a
cmpswap loop), so the value goes through two integer atomics on its bit pattern, which order like floats within
each sign: max is `smax` with the value where its sign bit is clear (INT_MIN, which changes nothing, otherwise) and
`umin` with it where set (UINT_MAX otherwise); min is `smin` / `umax` the same way. No loop, and the same in LDS.
`return_prev`: the returning forms (`sc0` on buffer atomics, `_rtn` on LDS ones) write the element's old value into
the data register, waited for like a load's; it goes to the `prev` fragment's element.
"""
from __future__ import annotations

import math

import sympy

from ..amdgcn.addr import linear_form
from ..amdgcn import isa, isa_table
from ..amdgcn.isa import EXEC, SCC, VCC, Inst
from ..amdgcn.abi import OUT_OF_RANGE_OFFSET
from ..amdgcn.memory import masked_dims, pack_f32_pair, unpack_16bit_to_f32
from ..errors import CompileError
from ..ir import nodes as N
from .context import Context
from .copy import WriterMask, _by_writer, _store_element
from .lds_elements import _address as lds_address

ANY = "any"  # ops/atomic.py Atomic.dims: a dst dim indexed by an expression other than start + one src index
INT_MIN, UINT_MAX, INT_MAX = 0x80000000, 0xFFFFFFFF, 0x7FFFFFFF
QUIET_NAN = 0x7FC00000
NEG_ZERO_F32 = 0x80000000  # -0.0: the other half of a lone 16-bit add (converted to the 16-bit -0.0)
# float max / min as two integer atomics on the bit pattern: (op where the sign bit is clear, its identity),
# (op where it is set, its identity)
SIGNED_PAIR = {"max": (("smax", INT_MIN), ("umin", UINT_MAX)), "min": (("smin", INT_MAX), ("umax", 0))}
INT_OPS = {"add": "add", "max": "smax", "min": "smin"}
GLOBAL_NAMES = {"add_f32": "buffer_atomic_add_f32", "pk_add_f16": "buffer_atomic_pk_add_f16",
                "pk_add_bf16": "buffer_atomic_pk_add_bf16", "add": "buffer_atomic_add", "smax": "buffer_atomic_smax",
                "smin": "buffer_atomic_smin", "umax": "buffer_atomic_umax", "umin": "buffer_atomic_umin"}
SHARED_NAMES = {"add_f32": "ds_add_f32", "pk_add_f16": "ds_pk_add_f16", "pk_add_bf16": "ds_pk_add_bf16",
                "add": "ds_add_u32", "smax": "ds_max_i32", "smin": "ds_min_i32", "umax": "ds_max_u32",
                "umin": "ds_min_u32"}


class _Target:
    """Where one element's atomics go: `issue(kind, data, returning)` emits atomic `kind` (a GLOBAL_NAMES key) with
    `data` at the element's address; `free()` releases the address registers."""

    def __init__(self, ctx: Context, s, index, shift, mask):
        self.ctx, self.s = ctx, s
        if s.dst.scope == N.GLOBAL:
            self.addr = ctx.access.address(s.dst, index, mask, 4, shift=shift)
            self.range_voffset = self.addr.voffset  # before any move to the element's dword
        else:
            self.vaddr, self.offset = lds_address(ctx, _lds_byte_address(ctx, s.dst, index, shift))

    def moved(self, delta: int):
        """The same element `delta` bytes further (a lone 16-bit element's dword below it)."""
        if self.s.dst.scope != N.GLOBAL:
            imm = int(self.offset.split(":")[1]) + delta
            if imm < 0:
                raise CompileError("T.atomic_*: a 16-bit shared element at LDS offset 0 cannot be updated alone",
                                   location=self.s.loc)
            self.offset = f"offset:{imm}"
            return
        a = self.addr
        if a.imm + delta >= 0:
            self.addr = a._replace(imm=a.imm + delta)
            return
        b = self.ctx.b
        moved = b.v.alloc(what="voffset of the dword below")
        b.emit("v_add_u32", moved, delta, a.voffset, comment="the dword holding the element")
        if a.temp:
            b.v.free(a.voffset)
        self.addr = a._replace(voffset=moved, temp=True)

    def align_to_dword(self, offset):
        """Point the address at the dword holding the (16-bit) element whose byte offset from the buffer's start is
        `offset` (SymPy), whichever half it is: returns a VGPR that is 2 where the element is the high half, else 0.
        The half is read off the offset itself (the tensor's base is 16-byte aligned, an LDS buffer's offset even),
        never off the access's split into V# base, soffset, voffset and offset: field, whose parts need not be."""
        b = self.ctx.b
        half = b.v.alloc(what="2 where the element is the dword's high half")
        b.valu("v_and_b32", half, 2, self.ctx.lower.vgpr(offset))
        moved = b.v.alloc(what="the address of the element's dword")
        if self.s.dst.scope == N.GLOBAL:
            b.valu("v_sub_u32", moved, self.addr.voffset, half)  # a lane steered out of range stays out of range
            self.free()
            self.addr = self.addr._replace(voffset=moved, temp=True)
        else:
            b.valu("v_sub_u32", moved, self.vaddr, half)
            self.vaddr, self.own_vaddr = moved, True
        return half

    def issue(self, kind: str, data, returning: bool, comment: str):
        """The register holding the old value where `returning` (`data` itself for a buffer atomic; a fresh one for
        an LDS atomic, `data` then freed), else `data`."""
        b = self.ctx.b
        if self.s.dst.scope == N.GLOBAL:
            a = self.addr
            b.emit(GLOBAL_NAMES[kind], data, a.voffset, a.srd, a.soffset,
                   suffix=f"offen offset:{a.imm}" + (" sc0" if returning else ""), comment=comment)
            return data
        name = SHARED_NAMES[kind]
        if not returning:
            b.emit(name, self.vaddr, data, suffix=self.offset, comment=comment)
            return data
        old = b.v.alloc()
        b.emit("_rtn_".join(name.rsplit("_", 1)), old, self.vaddr, data, suffix=self.offset, comment=comment)
        b.v.free(data)  # a returning atomic's data is always a temporary of the caller's
        return old

    def load_dword(self, dst, comment: str):
        """dst = the dword at the address (a compare-and-swap loop's first read)."""
        b = self.ctx.b
        if self.s.dst.scope == N.GLOBAL:
            a = self.addr
            b.emit("buffer_load_dword", dst, a.voffset, a.srd, a.soffset, suffix=f"offen offset:{a.imm}",
                   comment=comment)
        else:
            b.emit("ds_read_b32", dst, self.vaddr, suffix=self.offset, comment=comment)

    def compare_swap(self, new, expected, comment: str):
        """Store `new` where the dword still holds `expected`; returns the register the dword's old value lands in."""
        b = self.ctx.b
        if self.s.dst.scope == N.GLOBAL:
            a = self.addr
            pair = b.v.alloc(2, align=2, what="{new dword, the dword read}")
            b.emit("v_mov_b32", pair[0], new)
            b.emit("v_mov_b32", pair[1], expected)
            b.emit("buffer_atomic_cmpswap", pair, a.voffset, a.srd, a.soffset, suffix=f"offen offset:{a.imm} sc0",
                   comment=comment)
            return pair[0]
        old = b.v.alloc()  # ds_cmpst: data0 the compare value, data1 the new one (llc-22's cmpxchg on LDS)
        b.emit("ds_cmpst_rtn_b32", old, self.vaddr, expected, new, suffix=self.offset, comment=comment)
        return old

    def free(self):
        if self.s.dst.scope == N.GLOBAL and self.addr.temp:
            self.ctx.b.v.free(self.addr.voffset)
        if getattr(self, "own_vaddr", False):
            self.ctx.b.v.free(self.vaddr)


def _lds_byte_address(ctx: Context, shared: N.Buffer, index, shift):
    strides = [math.prod(shared.shape[d + 1:]) for d in range(len(shared.shape))]
    shift = shift or (0,) * len(index)
    return sympy.expand(ctx.shared[shared] + sum((sympy.sympify(i) + k) * st for i, k, st in zip(index, shift, strides))
                        * shared.dtype.bytes)


def _byte_offset(s, index):
    """The element's byte offset from the buffer's start (SymPy): the pairing and parity questions are asked of it."""
    dst = s.dst
    strides = dst.strides
    return sympy.expand(sum(sympy.sympify(i) * st for i, st in zip(index, strides)) * dst.dtype.bytes)


def _multiple_of(expr, n: int) -> bool:
    return all(int(c) % n == 0 for c in linear_form(expr).values())


def _element_index(s, lay, threads: int, r: int) -> tuple:
    """(index, shift) of the dst element that src element r updates: with an accumulator layout the index of its
    run's origin plus integer shifts (memoised address analysis, as passes/copy.py does), else the index itself.
    A dim indexed by another expression of the src indices (ANY) is that expression at the element's coordinates."""
    starts, moving = s.dims()
    if lay.acc_split is None:
        coords, offsets = lay.coords(r, threads), None
    else:
        coords, offsets = lay.acc_split(r)
    at = dict(zip(s.indices, coords if offsets is None else [c + o for c, o in zip(coords, offsets)]))
    index = tuple(st if d is None else sympy.sympify(k).xreplace(at) if d is ANY else st + coords[d]
                  for st, d, k in zip(starts, moving, s.index))
    if offsets is None:
        return index, None
    return index, tuple(0 if d is None or d is ANY else offsets[d] for d in moving)


def _mask(s) -> list:
    """The dims of a global dst whose elements may lie outside it: passes/copy.py's ragged tile edges, plus every
    dim indexed by another expression (ANY), each element checked."""
    if s.dst.scope != N.GLOBAL:
        return []
    region = s.region()
    _, moving = s.dims()
    dims = set(masked_dims(s.dst, region.starts, region.extents)) | {d for d, m in enumerate(moving) if m is ANY}
    return sorted(dims)


def _plan(ctx: Context, s) -> str:
    """How elements are applied: "f32", "signed_pair" (fp32 max / min), "int", "pk" (16-bit add), "cas" (a 16-bit
    update no instruction does: _cas_loop)."""
    dtype, op, arch = s.dst.dtype, s.op, ctx.b.arch.name
    where = f"T.atomic_{op} into {s.dst.scope} {s.dst.name} ({dtype.name})"
    if dtype.name == "float32":
        return "f32" if op == "add" else "signed_pair"
    if dtype.name == "int32":
        return "int"

    if dtype.is_16bit:
        if s.dst.scope == N.GLOBAL and not s.dst.spec.aligned16:
            raise CompileError(f"{where}: 16-bit atomics update whole dwords and {s.dst.name} does not start at a "
                               "16-byte aligned address; pass a tensor of its own (.clone())", location=s.loc)
        # (a shared buffer's bytes are padded to a whole sweep of the LDS banks, passes/lds.py: its last dword is
        # its own)
        if s.dst.scope == N.GLOBAL and s.dst.spec.nbytes % 4:
            raise CompileError(f"{where}: 16-bit atomics update whole dwords, and the dword of {s.dst.name}'s last "
                               f"element passes the end of its {s.dst.spec.nbytes} bytes, where the hardware drops "
                               "the update; give it an even number of elements (pad it by one)", location=s.loc)
        instruction = (GLOBAL_NAMES if s.dst.scope == N.GLOBAL else SHARED_NAMES)[f"pk_add_{dtype.short}"]
        native = op == "add" and arch in isa_table.lookup(instruction).arches  # gfx942 has no buffer bf16 add
        return "pk" if native else "cas"  # gfx942's global bf16 add, every 16-bit max / min: a compare-and-swap loop
    raise CompileError(f"{where}: atomics take float32, float16, bfloat16 and int32 elements", location=s.loc)


def _pieces(ctx: Context, s, lay, plan: str) -> list:
    """(first element r, elements) of each update: 16-bit elements in pairs where r and r + 1 are neighbours in
    memory at a 4-byte aligned offset on every thread (and a masked last dim cannot split the pair)."""
    if plan not in ("pk", "cas"):
        return [(r, 1) for r in range(lay.elems)]
    even_rows = s.dst.scope != N.GLOBAL or (len(s.dst.shape) - 1) not in _mask(s) or s.dst.shape[-1] % 2 == 0
    pieces, r = [], 0
    while r < lay.elems:
        if r % 2 == 0 and r + 1 < lay.elems and even_rows:
            a = _byte_offset(s, _full_index(s, lay, ctx.threads, r))
            b = _byte_offset(s, _full_index(s, lay, ctx.threads, r + 1))
            if sympy.expand(b - a) == 2 and _multiple_of(a, 4) and (s.dst.scope == N.GLOBAL or
                                                                     ctx.shared[s.dst] % 4 == 0):
                pieces.append((r, 2))
                r += 2
                continue
        pieces.append((r, 1))
        r += 1
    return pieces


def _full_index(s, lay, threads: int, r: int) -> tuple:
    index, shift = _element_index(s, lay, threads, r)
    return index if shift is None else tuple(sympy.sympify(i) + k for i, k in zip(index, shift))


def lower_atomic(ctx: Context, s) -> None:
    frag, lay, b = s.src, ctx.layouts[s.src], ctx.b
    plan = _plan(ctx, s)
    if s.prev is not None and lay.replicated:
        raise CompileError(f"T.atomic_{s.op}(..., return_prev=True): the values' fragment {frag.name} is held by "
                           "several threads (its layout replicates it), so only one of them updates each element and "
                           "the others would get no old value; use a tile of at least one element per thread",
                           location=s.loc)
    if s.dst.scope == N.SHARED and ctx.lds_state != "idle":
        # a read-modify-write: after other threads' reads (it overwrites) and writes (it reads) alike
        ctx.b.emit("s_barrier", comment="LDS atomics after other LDS accesses")
    # a compare-and-swap loop runs in the lanes inside the tensor only (it must not depend on what an out-of-range
    # atomic returns): every dim is then checked, so each lane outside has the out-of-range voffset exactly
    mask = list(range(len(s.dst.shape))) if plan == "cas" else _mask(s)
    for writer, group in _by_writer(lay, [(r, per, 0) for r, per in _pieces(ctx, s, lay, plan)]):
        with WriterMask(ctx, writer):
            for r, per, _ in group:
                index, shift = _element_index(s, lay, ctx.threads, r)
                target = _Target(ctx, s, index, shift, mask)
                _apply(ctx, s, plan, target, r, per)
                target.free()
    if s.dst.scope == N.SHARED:
        ctx.lds_state = "written"


def _apply(ctx: Context, s, plan: str, target: _Target, r: int, per: int) -> None:
    b, frag, ret = ctx.b, s.src, s.prev is not None
    what = f"{frag.name}[{r}:{r + per}] -> {s.dst.name}"
    value, temp = ctx.read_f32(frag, r)
    if _holds_ints(frag) and plan != "int":  # int32 values into a float tensor: converted as a store converts them
        as_float = b.v.alloc()
        b.valu("v_cvt_f32_i32", as_float, value)
        value, temp = as_float, True
    if plan == "f32":
        data = b.v.alloc() if ret else value
        if ret:
            b.emit("v_mov_b32", data, value)
        old = target.issue("add_f32", data, ret, f"atomic add {what}")
        _returned(ctx, s, r, old)
    elif plan == "int":
        data = b.v.alloc()
        if _holds_ints(frag):  # an int32 fragment's element is the int itself
            b.emit("v_mov_b32", data, value)
        else:  # C's conversion, as a store of a float into an int tensor: toward zero
            b.valu("v_cvt_i32_f32", data, value)
        old = target.issue(INT_OPS[s.op], data, ret, f"atomic {s.op} {what}")
        if ret and _holds_ints(s.prev):
            _returned(ctx, s, r, old)
        elif ret:
            as_float = b.v.alloc()
            b.valu("v_cvt_f32_i32", as_float, old)
            _returned(ctx, s, r, as_float)
        b.v.free(old)
    elif plan == "signed_pair":
        _signed_pair(ctx, s, target, r, value, what)
    elif plan == "cas":
        _cas_loop(ctx, s, target, r, per, value, what)
    else:
        _packed_add(ctx, s, target, r, per, value, what)
    if temp:
        b.v.free(value)


def _holds_ints(buf) -> bool:
    """Whether fragment `buf` holds 32-bit ints in its registers (an int32 fragment), not fp32 values."""
    return buf is not None and buf.dtype.name == "int32"


def _returned(ctx: Context, s, r: int, old) -> None:
    """The old fp32 value `old` of src element r into prev (then freed where it is a temporary)."""
    if s.prev is None:
        return
    _store_element(ctx, s.prev, r, old)
    ctx.b.v.free(old)


def _signed_pair(ctx: Context, s, target: _Target, r: int, value, what: str) -> None:
    """fp32 max / min as two integer atomics on the bit pattern (module docstring)."""
    b, ret = ctx.b, s.prev is not None
    (clear_op, clear_id), (set_op, set_id) = SIGNED_PAIR[s.op]
    olds = []
    for op, identity, sign_set in ((clear_op, clear_id, False), (set_op, set_id, True)):
        b.emit("v_cmp_gt_i32", VCC, 0, value, defs=(VCC,), comment="sign bit set?")
        data = b.v.alloc()
        ident = b.vgpr_constant(identity)
        # v_cndmask: VCC (sign set) picks the second source
        b.emit("v_cndmask_b32", data, *((ident, value) if sign_set else (value, ident)), VCC)
        olds.append(target.issue(op, data, ret, f"atomic {s.op} {what} ({'sign set' if sign_set else 'sign clear'})"))
    if not ret:
        for old in olds:
            b.v.free(old)
        return
    b.emit("v_cmp_gt_i32", VCC, 0, value, defs=(VCC,), comment="the atomic that applied the value returned its old")
    old = b.v.alloc()
    b.emit("v_cndmask_b32", old, olds[0], olds[1], VCC)
    for o in olds:
        b.v.free(o)
    _returned(ctx, s, r, old)


def _packed_add(ctx: Context, s, target: _Target, r: int, per: int, value, what: str) -> None:
    """16-bit add: a pair at once, or a lone element with -0.0 in the dword's other half."""
    b, ret, dtype = ctx.b, s.prev is not None, s.dst.dtype
    kind = "pk_add_f16" if dtype.name == "float16" else "pk_add_bf16"
    data = b.v.alloc()
    high = False
    if per == 2:
        hi, hi_temp = ctx.read_f32(s.src, r + 1)
        pack_f32_pair(b, data, value, hi, dtype)
        if hi_temp:
            b.v.free(hi)
    else:
        high = _element_half(ctx, s, target, r)
        zero = b.vgpr_constant(NEG_ZERO_F32)
        if isinstance(high, bool):
            pack_f32_pair(b, data, zero if high else value, value if high else zero, dtype)
        else:
            in_high = b.v.alloc()
            pack_f32_pair(b, data, value, zero, dtype)
            pack_f32_pair(b, in_high, zero, value, dtype)
            b.emit("v_cmp_ne_u32", VCC, 0, high, defs=(VCC,), comment="the high half?")
            b.emit("v_cndmask_b32", data, data, in_high, VCC)
            b.v.free(in_high)
    old = target.issue(kind, data, ret, f"atomic add {what}")
    if ret and not isinstance(high, bool):  # the old value's half: shift the high one down first
        b.emit("v_cmp_ne_u32", VCC, 0, high, defs=(VCC,), comment="the high half?")
        shifted = b.v.alloc()
        b.valu("v_lshrrev_b32", shifted, 16, old)
        b.emit("v_cndmask_b32", old, old, shifted, VCC)
        b.v.free(shifted)
        high = False
    if ret:
        halves = [(r, False), (r + 1, True)] if per == 2 else [(r, high)]
        for e, upper in halves:
            v = b.v.alloc()
            unpack_16bit_to_f32(b, v, old, upper, dtype)
            _returned(ctx, s, e, v)
    if not isinstance(high, bool):
        b.v.free(high)
    b.v.free(old)


def _element_half(ctx: Context, s, target: _Target, r: int):
    """Which half of its dword src element r's dst element is: False (low), True (high), or a VGPR that is 2 where
    it is the high half (the thread's offset decides; the address then points at the dword either way)."""
    offset = _byte_offset(s, _full_index(s, ctx.layouts[s.src], ctx.threads, r))
    base = 0 if s.dst.scope == N.GLOBAL else ctx.shared[s.dst]
    if _multiple_of(offset + base, 4):
        return False
    if _multiple_of(offset + base - 2, 4):
        target.moved(-2)
        return True
    return target.align_to_dword(offset + base)


def _combine(ctx: Context, op: str, old, value, out, nan) -> None:
    """out = op(old, value) in fp32: a sum, or torch.maximum / minimum (NaN when either is NaN: `nan` a VGPR
    holding a quiet NaN)."""
    b = ctx.b
    if op == "add":
        b.valu("v_add_f32", out, old, value)
        return
    b.emit("v_cmp_u_f32", VCC, old, value, defs=(VCC,), comment="either NaN?")
    b.valu(f"v_{op}_f32", out, old, value)
    b.emit("v_cndmask_b32", out, out, nan, VCC, comment="then NaN")


def _cas_loop(ctx: Context, s, target: _Target, r: int, per: int, value, what: str) -> None:
    """A 16-bit update without an atomic instruction: read the dword, compute the new one (the element's half
    updated in fp32 and rounded to nearest even, the other half's bits kept), swap it in where the dword still holds
    what was read (`buffer_atomic_cmpswap`, `ds_cmpst_rtn_b32`), and go round again in the lanes where it did not
    (another thread got there first), with what came back. As llc-22 lowers `atomicrmw fadd bfloat` on gfx942 and
    any 16-bit `atomicrmw fmax`. In global memory the loop runs in the lanes inside the tensor only (every dim
    masked: a lane outside has the out-of-range voffset), so no lane waits on what an out-of-range atomic returns."""
    b, dtype, ret = ctx.b, s.dst.dtype, s.prev is not None
    high = False if per == 2 else _element_half(ctx, s, target, r)
    values = [value]
    if per == 2:
        hi, hi_temp = ctx.read_f32(s.src, r + 1)
        values.append(hi)
    # constants and the shift first, in every lane: a VGPR constant first made under the narrower EXEC below would
    # be missing in the other lanes, yet reused from the builder's cache afterwards
    nan = b.vgpr_constant(QUIET_NAN) if s.op != "add" else None
    if per == 2:
        field = shift = None
    elif isinstance(high, bool):
        field, shift = b.vgpr_constant(0xFFFF0000 if high else 0x0000FFFF), None
    else:
        shift, field = b.v.alloc(), b.v.alloc()
        b.valu("v_lshlrev_b32", shift, 3, high)  # 0 or 16 bits
        b.valu("v_lshlrev_b32", field, shift, b.vgpr_constant(0xFFFF))
    saved = b.s.alloc(2, align=2, what="exec before the cmpswap loop")
    b.emit("s_mov_b64", saved, EXEC, defs=(saved,), uses=(EXEC,))
    if s.dst.scope == N.GLOBAL:
        b.emit("v_cmp_ne_u32", VCC, OUT_OF_RANGE_OFFSET, target.range_voffset, defs=(VCC,),
               comment="the lanes inside the tensor")
        b.emit("s_and_b64", EXEC, EXEC, VCC, defs=(EXEC, SCC), uses=(EXEC, VCC))
    with b.lanes_masked():
        old = _cas_rounds(ctx, s, target, per, high, values, shift, field, nan, what)
    b.emit("s_mov_b64", EXEC, saved, defs=(EXEC,), uses=(saved,))
    if ret:  # `old` holds, in every lane, the dword its successful cmpswap replaced
        if per == 2:
            for e, upper in ((r, False), (r + 1, True)):
                v = b.v.alloc()
                unpack_16bit_to_f32(b, v, old, upper, dtype)
                _returned(ctx, s, e, v)
        else:
            if not isinstance(high, bool):
                b.valu("v_lshrrev_b32", old, shift, old)
            v = b.v.alloc()
            unpack_16bit_to_f32(b, v, old, high is True, dtype)
            _returned(ctx, s, r, v)
    if per == 2 and hi_temp:
        b.v.free(values[1])


def _cas_rounds(ctx: Context, s, target: _Target, per: int, high, values: list, shift, field, nan, what: str):
    """The load and the loop of _cas_loop, in the lanes it runs in; returns the register that ends up holding, in
    each lane, the dword its successful compare-and-swap replaced."""
    b, dtype = ctx.b, s.dst.dtype
    old = b.v.alloc(what="the dword as last read")
    target.load_dword(old, f"{what}: the dword to update")
    head = b.label("cas")
    b.frames[-1].insts.append(Inst(head, kind=isa.LABEL))
    new, current, updated = b.v.alloc(), b.v.alloc(), b.v.alloc()
    if per == 2:
        halves = []
        for upper, v in zip((False, True), values):
            unpack_16bit_to_f32(b, current, old, upper, dtype)
            h = b.v.alloc()
            _combine(ctx, s.op, current, v, h, nan)
            halves.append(h)
        pack_f32_pair(b, new, halves[0], halves[1], dtype)
    else:
        if isinstance(high, bool):
            unpack_16bit_to_f32(b, current, old, high, dtype)
        else:
            b.valu("v_lshrrev_b32", current, shift, old)
            unpack_16bit_to_f32(b, current, current, False, dtype)
        _combine(ctx, s.op, current, values[0], updated, nan)
        pack_f32_pair(b, updated, updated, None, dtype)  # the new element in the low 16 bits
        b.valu("v_lshlrev_b32", updated, shift if shift is not None else 16 if high else 0, updated)
        b.valu("v_bfi_b32", new, field, updated, old)  # the element's bits from `updated`, the rest from `old`
    seen = target.compare_swap(new, old, f"{what}: store the new dword where it still holds the one read")
    done = b.s.alloc(2, align=2, what="lanes whose compare-and-swap took")
    b.emit("v_cmp_eq_u32_e64", done, seen, old, comment="it held what we read: done")
    b.emit("v_mov_b32", old, seen)
    b.emit("s_andn2_b64", EXEC, EXEC, done, defs=(EXEC, SCC), uses=(EXEC, done))
    b.emit("s_cbranch_execnz", head)
    return old
