"""Global memory access and value conversions shared by the lowering passes.

Global addresses: byte offset = sum(index_d * stride_d * elem_bytes), split by SymPy into a uniform
part (folded into the V# base, see abi.KernelAbi.resource), a per-lane part (voffset VGPR) and a
constant (the 12-bit `offset:` field, the rest folded into voffset). Ragged edges: rows past the end
fall outside NUM_RECORDS; columns past the end of an inner dimension are masked by steering voffset
to an out-of-range value, so the hardware returns 0 for loads and drops stores.
"""
from __future__ import annotations

import sympy

from ..ir import nodes as N
from .abi import OUT_OF_RANGE_OFFSET, KernelAbi
from .addr import ExprLowering, split_uniform
from .isa import VCC, Reg

LOAD_OPS = {2: "buffer_load_ushort", 4: "buffer_load_dword", 8: "buffer_load_dwordx2",
            12: "buffer_load_dwordx3", 16: "buffer_load_dwordx4"}
STORE_OPS = {2: "buffer_store_short", 4: "buffer_store_dword", 8: "buffer_store_dwordx2",
             12: "buffer_store_dwordx3", 16: "buffer_store_dwordx4"}
BF16_ROUND_BIAS = 0x7FFF
BF16_QUIET_BIT = 0x400000
PERM_HIGH_HALVES = 0x07060302  # v_perm_b32 selector: {hi[31:16], lo[31:16]}


def access_width(buffer: N.Buffer, run_elems: int, masked_last_dim: bool) -> int:
    """Widest legal access (bytes, <= 16) for runs of `run_elems` elements starting at multiples of it."""
    es = buffer.dtype.bytes
    if not buffer.spec.aligned16:
        return es
    width = 16
    run_bytes = run_elems * es
    constraints = [run_bytes] + [st * es for st in buffer.spec.strides[:-1]]
    if masked_last_dim:
        constraints.append(buffer.shape[-1] * es)
    while width > es and any(c % width for c in constraints):
        width //= 2
    return width


def provably_multiple(expr, n: int) -> bool:
    expr = sympy.expand(sympy.sympify(expr))
    return all(int(c) % n == 0 if c.is_Integer else False
               for c in (term.as_coeff_Mul()[0] for term in sympy.Add.make_args(expr))) or expr == 0


def masked_dims(buffer: N.Buffer, starts, extents) -> list:
    """Inner dims whose tile can run past the tensor's edge (dim 0 is covered by NUM_RECORDS)."""
    dims = []
    for d in range(1, len(buffer.shape)):
        e, s = extents[d], starts[d]
        if buffer.shape[d] % e == 0 and provably_multiple(s, e):
            continue
        dims.append(d)
    return dims


class GlobalAccess:
    def __init__(self, abi: KernelAbi):
        self.abi = abi
        self.b = abi.b
        self.lower: ExprLowering = abi.lower

    def address(self, buffer: N.Buffer, index, mask_dims) -> tuple:
        """(V#, voffset VGPR, immediate offset) of element `index` (one SymPy expr per dim)."""
        es = buffer.dtype.bytes
        offset = sympy.expand(sum(idx * st * es for idx, st in zip(index, buffer.spec.strides)))
        uniform, lane, const = split_uniform(offset, self.b.lane_symbols)
        limit = self.b.arch.mubuf_max_imm_offset + 1
        imm = const % limit if const >= 0 else 0
        lane = lane + (const - imm)
        srd = self.abi.resource(buffer, uniform)
        if not mask_dims:
            return srd, self.lower.vgpr(lane), imm
        return srd, self._masked_voffset(buffer, index, mask_dims, lane), imm

    def _masked_voffset(self, buffer, index, mask_dims, lane) -> Reg:
        conds = []
        for d in mask_dims:
            u, l, c = split_uniform(sympy.expand(index[d]), self.b.lane_symbols)
            conds.append((sympy.sympify(buffer.shape[d]) - u, l + c))
        key = ("vmask", (lane, tuple(conds)))
        hit = self.b.cse_get(*key)
        if hit is not None:
            return hit
        mask = self._lane_mask(tuple(conds))
        voff = self.lower.vgpr(lane)
        frame = max(self.b.frame_of(lane), mask_frame(self.b, conds))
        out = self.b.v.alloc(what="masked voffset")
        oob = self.b.vgpr_constant(OUT_OF_RANGE_OFFSET)
        self.b.emit("v_cndmask_b32", out, oob, voff, mask, frame=frame, comment="out-of-range lanes")
        self.b.cse_put(key[0], key[1], out, frame)
        return out

    def _lane_mask(self, conds) -> Reg:
        """An SGPR pair: lanes whose index is inside the tensor on every masked dim."""
        hit = self.b.cse_get("lanemask", conds)
        if hit is not None:
            return hit
        frame = mask_frame(self.b, conds)
        mask = self.b.s.alloc(2, align=2, what="lane mask")
        for n, (limit, lhs) in enumerate(conds):
            lim = self.lower.sgpr(limit)
            if isinstance(lim, int) and not -16 <= lim <= 64:
                lim = self.b.sgpr_constant(lim)
            dst = mask if n == 0 else VCC
            self.b.emit("v_cmp_gt_i32_e64", dst, lim, self.lower.vgpr(lhs), frame=frame,
                        comment="inside the tensor on this dim?")
            if n:
                self.b.emit("s_and_b64", mask, mask, VCC, frame=frame)
        self.b.cse_put("lanemask", conds, mask, frame)
        return mask

    def load(self, dst: Reg, width: int, buffer: N.Buffer, index, mask_dims, comment=""):
        srd, voff, imm = self.address(buffer, index, mask_dims)
        self.b.emit(LOAD_OPS[width], dst, voff, srd, 0, suffix=f"offen offset:{imm}", comment=comment)

    def store(self, src: Reg, width: int, buffer: N.Buffer, index, mask_dims, comment=""):
        srd, voff, imm = self.address(buffer, index, mask_dims)
        self.b.emit(STORE_OPS[width], src, voff, srd, 0, suffix=f"offen offset:{imm}", comment=comment)


def mask_frame(b, conds) -> int:
    return max(max(b.frame_of(limit), b.frame_of(lhs)) for limit, lhs in conds)


# ---- conversions between fp32 registers and 16-bit storage ---------------------------------------

def unpack_16bit_to_f32(b, dst: Reg, src: Reg, high: bool, dtype):
    """dst (f32) = the low or high 16-bit half of src interpreted as bf16/f16."""
    if dtype.name == "bfloat16":
        if high:
            b.emit("v_and_b32", dst, 0xFFFF0000, src)
        else:
            b.emit("v_lshlrev_b32", dst, 16, src)
    else:
        if high:
            b.emit("v_lshrrev_b32", dst, 16, src)
            b.emit("v_cvt_f32_f16", dst, dst)
        else:
            b.emit("v_cvt_f32_f16", dst, src)


def _round_f32_to_bf16_high(b, tmp: Reg, x: Reg):
    """tmp[31:16] = bf16(x), round to nearest even; NaN stays NaN (quiet)."""
    b.emit("v_bfe_u32", tmp, x, 16, 1)
    b.emit("v_add3_u32", tmp, x, tmp, b.sgpr_constant(BF16_ROUND_BIAS))
    b.emit("v_cmp_u_f32", VCC, x, x, defs=(VCC,))
    quiet = b.v.alloc()
    b.emit("v_or_b32", quiet, BF16_QUIET_BIT, x)
    b.emit("v_cndmask_b32", tmp, tmp, quiet, VCC)
    b.v.free(quiet)


def pack_f32_pair(b, dst: Reg, lo: Reg, hi, dtype):
    """dst = {dtype(hi), dtype(lo)} (RNE). `hi` None packs lo alone (upper half 0)."""
    arch = b.arch
    if dtype.name == "float16":
        t0 = b.v.alloc()
        b.emit("v_cvt_f16_f32", t0, lo)
        if hi is None:
            b.emit("v_and_b32", dst, 0xFFFF, t0)
        else:
            t1 = b.v.alloc()
            b.emit("v_cvt_f16_f32", t1, hi)
            b.emit("v_pack_b32_f16", dst, t0, t1)
            b.v.free(t1)
        b.v.free(t0)
        return
    if arch.has_cvt_pk_bf16_f32:
        b.emit("v_cvt_pk_bf16_f32", dst, lo, hi if hi is not None else 0)
        return
    t0 = b.v.alloc()
    _round_f32_to_bf16_high(b, t0, lo)
    if hi is None:
        b.emit("v_lshrrev_b32", dst, 16, t0)
    else:
        t1 = b.v.alloc()
        _round_f32_to_bf16_high(b, t1, hi)
        b.emit("v_perm_b32", dst, t1, t0, b.sgpr_constant(PERM_HIGH_HALVES))
        b.v.free(t1)
    b.v.free(t0)
