"""Vector ALU instructions (VOP1/VOP2/VOP3/VOPC/VOP3P as objdump prints them), EXEC-masked.

Semantics follow the CDNA3 ISA guide. Notes on choices the guide leaves to the reader:
  * Integer inline constants are the integer's bit pattern in every operand type (so `1` in a float
    operand is the denormal 0x00000001); inline float constants are f32 values (f16 values in a
    16-bit operand, f16 in the low half and 0 in the high half of a packed 16-bit operand).
  * Float results honour the descriptor's FLOAT_DENORM_MODE_32 (flush inputs and/or outputs);
    rounding is round-to-nearest-even (other FLOAT_ROUND_MODE settings are refused at launch).
  * 16-bit results of VOP1/VOP2/VOP3 ops zero bits [31:16] (GFX9 behaviour without op_sel/SDWA).
  * v_max/v_min follow IEEE mode: a NaN operand yields the other operand.
"""
from __future__ import annotations

import torch

from .decode import EXEC_LO, Const, Reg
from .fpmath import (FLT_MIN, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, f32_to_f16_rtz_bits, fma_f32,
                     flush_denorms, fma_f64_odd, f64_to_f32_odd)
from .ops_fp8 import build_fp8
from .ops_vext import build_vext, src16
from .ops_xlane import build_dpp, build_sdwa
from .program import INT_MIN, Binder, BindError, Handler, as_bits, as_f32, u32

M32 = 0xFFFFFFFF


def _i32(x: torch.Tensor) -> torch.Tensor:
    """int64 (any value) -> int32 with the low 32 bits."""
    return (x & M32).to(torch.int32) if x.dtype != torch.int32 else x


def _ucmp(a):
    """int32 bits -> int32 that orders like the unsigned value under signed comparison."""
    return a ^ INT_MIN


def _mul_hi_u32(a, b):
    a64, b64 = u32(a), u32(b)
    p_lo = a64 * (b64 & 0xFFFF)
    p_hi = a64 * (b64 >> 16)
    return _i32((p_hi + (p_lo >> 16)) >> 16)


def _bfe_u(a, off, width):
    off, width = u32(off) & 31, u32(width) & 31
    mask = torch.bitwise_left_shift(torch.ones_like(width), width) - 1
    return _i32((u32(a) >> off) & mask)


def _bfe_i(a, off, width):
    off, width = u32(off) & 31, u32(width) & 31
    mask = torch.bitwise_left_shift(torch.ones_like(width), width) - 1
    v = (u32(a) >> off) & mask
    sign = (v >> (width - 1).clamp(min=0)) & 1
    v = torch.where((width > 0) & (sign == 1), v - torch.bitwise_left_shift(torch.ones_like(width), width), v)
    return _i32(torch.where(width == 0, torch.zeros_like(v), v))


def _perm(s0, s1, sel):
    """v_perm_b32: bytes of {s0, s1} (s1 = bytes 0..3) picked by the 4 selector bytes of sel."""
    x = (u32(s0) << 32) | u32(s1)
    shape = torch.broadcast_shapes(x.shape, sel.shape)
    x = x.expand(shape)
    byte = [(x >> (8 * i)) & 0xFF for i in range(8)]
    sign = [((x >> (8 * i + 7)) & 1) * 0xFF for i in (1, 3, 5, 7)]
    table = torch.stack(byte + sign + [torch.zeros_like(x), torch.full_like(x, 0xFF)], dim=-1)
    s = u32(sel).expand(shape)
    out = torch.zeros_like(x)
    for i in range(4):
        k = ((s >> (8 * i)) & 0xFF).clamp(max=13)
        out |= torch.gather(table, -1, k.unsqueeze(-1)).squeeze(-1) << (8 * i)
    return _i32(out)


def _shr64(lo, hi, s, arith):
    """(lo, hi) >> s (s in 0..63); lo/hi are int32 bits; returns (lo, hi) int32."""
    s = u32(s) & 63
    ulo, uhi = u32(lo), u32(hi)
    shi = hi.to(torch.int64)  # signed high word
    top = shi if arith else uhi
    small = s < 32
    s_small = torch.where(small, s, torch.zeros_like(s))
    s_big = torch.where(small, torch.zeros_like(s), s - 32)
    lo_small = (ulo >> s_small) | ((uhi << (32 - s_small)) & M32)
    lo_small = torch.where(s_small == 0, ulo, lo_small)
    hi_small = top >> s_small
    lo_big = top >> s_big
    hi_big = (shi >> 31) if arith else torch.zeros_like(uhi)
    return _i32(torch.where(small, lo_small, lo_big)), _i32(torch.where(small, hi_small, hi_big))


def _shl64(lo, hi, s):
    s = u32(s) & 63
    x = (u32(hi) << 32) | u32(lo)
    r = x << s
    return _i32(r), _i32(r >> 32)


def _med3(a, b, c):
    return torch.fmax(torch.fmin(a, b), torch.fmin(torch.fmax(a, b), c))


def _cvt_u32(x):
    x = torch.nan_to_num(x, nan=0.0)
    return _i32(x.double().clamp(0, 4294967295.0).trunc().to(torch.int64))


def _cvt_i32(x):
    x = torch.nan_to_num(x, nan=0.0)
    return x.double().clamp(-2147483648.0, 2147483647.0).trunc().to(torch.int32)


def _ldexp(x, e):
    return (x.double() * torch.pow(2.0, e.to(torch.float64).clamp(-400, 400))).float()


def _faithful(fn, a):
    """fn(a) as the transcendental unit returns it, within 1 ulp (the ISA guide's bound): computed in f64, then
    truncated toward zero to f32, so it differs from the correctly rounded value about half the time and code that
    must tolerate the hardware's error (LLVM's sqrt correction, T.log's split product) is exercised."""
    d = fn(a.double())
    r = d.float()
    away = (r.double().abs() > d.abs()) & torch.isfinite(r)  # rounded up in magnitude: step back (overflow stays inf)
    return torch.where(away, (r.view(torch.int32) - 1).view(torch.float32), r)


def _flush_input(a):
    """A denormal input reads as a zero of its sign (the reason LLVM scales them up before v_log/v_sqrt/v_rsq)."""
    return torch.where(a.abs() < FLT_MIN, a * 0.0, a)


def _flush_result(r):
    """A result below 2^-126 is a zero of its sign (v_exp_f32 and v_rcp_f32 give no denormal: LLVM scales around
    them for llvm.exp2.f32 and a 2.5-ulp 1/x)."""
    return torch.where(r.abs() < FLT_MIN, r * 0.0, r)


# ---- op tables -------------------------------------------------------------------------------------------
# integer ops: (sources, fn on int32 bits)
INT_OPS = {
    "v_mov_b32": (1, lambda a: a),
    "v_not_b32": (1, lambda a: ~a),
    "v_bfrev_b32": (1, lambda a: _i32(sum(((u32(a) >> i) & 1) << (31 - i) for i in range(32)))),
    "v_add_u32": (2, lambda a, b: a + b),
    "v_sub_u32": (2, lambda a, b: a - b),
    "v_subrev_u32": (2, lambda a, b: b - a),
    "v_add_i32": (2, lambda a, b: a + b),  # GFX9 VOP3 signed add/sub: without clamp the same bits as _u32
    "v_sub_i32": (2, lambda a, b: a - b),
    "v_mul_lo_u32": (2, lambda a, b: _i32(a.to(torch.int64) * b.to(torch.int64))),
    "v_mul_hi_u32": (2, _mul_hi_u32),
    "v_mul_hi_i32": (2, lambda a, b: _i32((a.to(torch.int64) * b.to(torch.int64)) >> 32)),
    "v_mul_u32_u24": (2, lambda a, b: _i32(u32(a & 0xFFFFFF) * u32(b & 0xFFFFFF))),
    "v_mul_hi_u32_u24": (2, lambda a, b: _i32((u32(a & 0xFFFFFF) * u32(b & 0xFFFFFF)) >> 32)),
    "v_mul_i32_i24": (2, lambda a, b: _i32(((a << 8) >> 8).to(torch.int64) * ((b << 8) >> 8).to(torch.int64))),
    "v_mad_u32_u24": (3, lambda a, b, c: _i32(u32(a & 0xFFFFFF) * u32(b & 0xFFFFFF) + u32(c))),
    "v_mad_i32_i24": (3, lambda a, b, c: _i32(((a << 8) >> 8).to(torch.int64) * ((b << 8) >> 8).to(torch.int64)
                                             + c.to(torch.int64))),
    "v_lshlrev_b32": (2, lambda a, b: b << (a & 31)),
    "v_lshrrev_b32": (2, lambda a, b: _i32(u32(b) >> (a & 31).to(torch.int64))),
    "v_ashrrev_i32": (2, lambda a, b: b >> (a & 31)),
    "v_and_b32": (2, lambda a, b: a & b),
    "v_or_b32": (2, lambda a, b: a | b),
    "v_xor_b32": (2, lambda a, b: a ^ b),
    "v_max_u32": (2, lambda a, b: torch.where(_ucmp(a) > _ucmp(b), a, b)),
    "v_min_u32": (2, lambda a, b: torch.where(_ucmp(a) < _ucmp(b), a, b)),
    "v_max_i32": (2, torch.maximum),
    "v_min_i32": (2, torch.minimum),
    "v_lshl_add_u32": (3, lambda a, b, c: (a << (b & 31)) + c),
    "v_add_lshl_u32": (3, lambda a, b, c: (a + b) << (c & 31)),
    "v_lshl_or_b32": (3, lambda a, b, c: (a << (b & 31)) | c),
    "v_and_or_b32": (3, lambda a, b, c: (a & b) | c),
    "v_or3_b32": (3, lambda a, b, c: a | b | c),
    "v_add3_u32": (3, lambda a, b, c: a + b + c),
    "v_xad_u32": (3, lambda a, b, c: (a ^ b) + c),
    "v_bfe_u32": (3, _bfe_u),
    "v_bfe_i32": (3, _bfe_i),
    "v_bfi_b32": (3, lambda a, b, c: (a & b) | (~a & c)),
    "v_bfm_b32": (2, lambda a, b: _i32(((torch.ones_like(u32(a)) << (u32(a) & 31)) - 1) << (u32(b) & 31))),
    "v_perm_b32": (3, _perm),
    "v_alignbit_b32": (3, lambda a, b, c: _i32((((u32(a) << 32) | u32(b)) >> (u32(c) & 31)))),
    "v_alignbyte_b32": (3, lambda a, b, c: _i32((((u32(a) << 32) | u32(b)) >> ((u32(c) & 3) * 8)))),
    "v_max3_u32": (3, lambda a, b, c: _umax(_umax(a, b), c)),
    "v_min3_u32": (3, lambda a, b, c: _umin(_umin(a, b), c)),
    "v_max3_i32": (3, lambda a, b, c: torch.maximum(torch.maximum(a, b), c)),
    "v_min3_i32": (3, lambda a, b, c: torch.minimum(torch.minimum(a, b), c)),
    "v_med3_i32": (3, lambda a, b, c: torch.maximum(torch.minimum(a, b), torch.minimum(torch.maximum(a, b), c))),
    "v_med3_u32": (3, lambda a, b, c: _umax(_umin(a, b), _umin(_umax(a, b), c))),
    "v_sad_u32": (3, lambda a, b, c: _i32((u32(a) - u32(b)).abs() + u32(c))),
    "v_cvt_f32_ubyte0": (1, lambda a: as_bits((a & 0xFF).float())),
    "v_cvt_f32_ubyte1": (1, lambda a: as_bits(((a >> 8) & 0xFF).float())),
    "v_cvt_f32_ubyte2": (1, lambda a: as_bits(((a >> 16) & 0xFF).float())),
    "v_cvt_f32_ubyte3": (1, lambda a: as_bits(((a >> 24) & 0xFF).float())),
    "v_cvt_f32_u32": (1, lambda a: as_bits(u32(a).to(torch.float32))),
    "v_cvt_f32_i32": (1, lambda a: as_bits(a.to(torch.float32))),
}


def _umax(a, b):
    return torch.where(_ucmp(a) > _ucmp(b), a, b)


def _umin(a, b):
    return torch.where(_ucmp(a) < _ucmp(b), a, b)


# f32 ops: (sources, fn on float32) -> float32
F32_OPS = {
    "v_add_f32": (2, lambda a, b: a + b),
    "v_sub_f32": (2, lambda a, b: a - b),
    "v_subrev_f32": (2, lambda a, b: b - a),
    "v_mul_f32": (2, lambda a, b: a * b),
    "v_max_f32": (2, torch.fmax),
    "v_min_f32": (2, torch.fmin),
    "v_max3_f32": (3, lambda a, b, c: torch.fmax(torch.fmax(a, b), c)),
    "v_min3_f32": (3, lambda a, b, c: torch.fmin(torch.fmin(a, b), c)),
    "v_med3_f32": (3, _med3),
    "v_fma_f32": (3, fma_f32),
    # the transcendental unit: within 1 ulp, no denormals (docs/isa-notes.md, "Transcendental instructions")
    "v_exp_f32": (1, lambda a: _flush_result(_faithful(torch.exp2, a))),
    "v_log_f32": (1, lambda a: _faithful(torch.log2, _flush_input(a))),
    "v_rcp_f32": (1, lambda a: _flush_result(_faithful(torch.reciprocal, _flush_input(a)))),
    # correctly rounded (LLVM's integer division sequences are built on it; see ops_vext.py)
    "v_rcp_iflag_f32": (1, torch.reciprocal),
    "v_rsq_f32": (1, lambda a: _faithful(torch.rsqrt, _flush_input(a))),
    "v_sqrt_f32": (1, lambda a: _faithful(torch.sqrt, _flush_input(a))),
    "v_floor_f32": (1, torch.floor),
    "v_ceil_f32": (1, torch.ceil),
    "v_trunc_f32": (1, torch.trunc),
    "v_rndne_f32": (1, torch.round),
    "v_fract_f32": (1, lambda a: a - torch.floor(a)),
}
# ops with an f32 input and an integer (bits) output
F32_TO_INT = {
    "v_cvt_u32_f32": _cvt_u32,
    "v_cvt_i32_f32": _cvt_i32,
}

CMP_INT = {
    "f": lambda a, b: torch.zeros(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.bool, device=a.device),
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ne": lambda a, b: a != b, "lg": lambda a, b: a != b, "ge": lambda a, b: a >= b,
    "t": lambda a, b: torch.ones(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.bool, device=a.device),
}
CMP_F32 = {
    "f": CMP_INT["f"], "tru": CMP_INT["t"],
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "lg": lambda a, b: (a < b) | (a > b), "ge": lambda a, b: a >= b,
    "o": lambda a, b: ~(torch.isnan(a) | torch.isnan(b)), "u": lambda a, b: torch.isnan(a) | torch.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
}

PK_F16 = {"v_pk_add_f16": (2, lambda a, b: a + b), "v_pk_mul_f16": (2, lambda a, b: a * b),
          "v_pk_max_f16": (2, torch.fmax), "v_pk_min_f16": (2, torch.fmin), "v_pk_fma_f16": (3, None)}
PK_F32 = {"v_pk_add_f32": (2, lambda a, b: a + b), "v_pk_mul_f32": (2, lambda a, b: a * b),
          "v_pk_fma_f32": (3, fma_f32)}


def _no_mods(ins, allowed=()):
    bad = [k for k in ins.mods if k not in allowed]
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {ins.base}")


def _lanes(mask, n):
    return mask.expand(n, 64) if mask.shape != (n, 64) else mask


def build_valu(ins, b: Binder, index):
    """Handler for a VALU instruction, or None when `ins` is not one this module knows."""
    base, ops, ctx = ins.base, ins.operands, b.ctx
    if ins.suffix == "dpp":
        return build_dpp(ins, b, index, build_valu)
    if ins.suffix == "sdwa":
        return build_sdwa(ins, b, index, build_valu)
    h = build_vext(ins, b, index) or build_fp8(ins, b, index)
    if h is not None:
        return h
    if base == "v_nop":  # a VALU issue slot that does nothing (aiter's FAv3 kernels pad with it)
        return Handler(ins, index, lambda g: None, "valu", b)
    if base in INT_OPS:
        return _int_op(ins, b, index)
    if base in F32_OPS or base in F32_TO_INT or base in ("v_fmac_f32", "v_mac_f32", "v_fmaak_f32", "v_fmamk_f32",
                                                          "v_ldexp_f32"):
        return _f32_op(ins, b, index)
    if base.startswith(("v_cmp_", "v_cmpx_")):
        return _cmp(ins, b, index)
    if base in ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32",
                "v_subbrev_co_u32"):
        return _carry_op(ins, b, index)
    if base == "v_cndmask_b32":
        return _cndmask(ins, b, index)
    if base in ("v_lshlrev_b64", "v_lshrrev_b64", "v_ashrrev_i64"):
        return _shift64(ins, b, index)
    if base in ("v_mov_b64", "v_pk_mov_b32"):
        return _mov64(ins, b, index)
    if base in ("v_readfirstlane_b32", "v_readlane_b32", "v_writelane_b32"):
        return _lane_access(ins, b, index)
    if base in ("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32"):
        return _mbcnt(ins, b, index)
    if base in ("v_cvt_f32_f16", "v_cvt_f16_f32", "v_cvt_pkrtz_f16_f32", "v_pack_b32_f16", "v_cvt_pk_bf16_f32",
                "v_cvt_f32_bf16", "v_cvt_pk_f16_f32"):
        return _convert16(ins, b, index)
    if base in PK_F16:
        return _packed16(ins, b, index)
    if base in PK_F32:
        return _packed32(ins, b, index)
    if base in ("v_accvgpr_read_b32", "v_accvgpr_write_b32", "v_accvgpr_mov_b32"):
        return _accvgpr(ins, b, index)
    return None


# ---- families -----------------------------------------------------------------------------------------------
def _clamp_int(ins):
    return bool(ins.mods.get("clamp"))


def _int_op(ins, b, index):
    n, fn = INT_OPS[ins.base]
    ops = ins.operands
    if len(ops) != n + 1:
        raise BindError(f"expected {n + 1} operands")
    saturate = _clamp_int(ins)
    if saturate and ins.base not in ("v_add_u32", "v_sub_u32", "v_subrev_u32"):
        raise BindError("clamp is only modelled for v_add_u32/v_sub_u32/v_subrev_u32")
    _no_mods(ins, ("clamp",))
    dst = b.vdst(ops[0])
    srcs = [b.src(op, float_mods=ins.base.startswith("v_cvt_f32")) for op in ops[1:]]
    base = ins.base

    if saturate:
        def run(g):
            a, c = (u32(r(g)) for r in srcs)
            v = {"v_add_u32": a + c, "v_sub_u32": a - c, "v_subrev_u32": c - a}[base]
            g.wv(dst, _i32(v.clamp(0, M32)))
    elif n == 1:
        s0 = srcs[0]

        def run(g):
            g.wv(dst, fn(s0(g)))
    elif n == 2:
        s0, s1 = srcs

        def run(g):
            g.wv(dst, fn(s0(g), s1(g)))
    else:
        s0, s1, s2 = srcs

        def run(g):
            g.wv(dst, fn(s0(g), s1(g), s2(g)))
    return Handler(ins, index, run, "valu", b)


def _f32_out(ins, ctx):
    """Post-processing of an f32 result: omod, clamp, denorm flush."""
    omod = ins.mods.get("omod")
    clamp = bool(ins.mods.get("clamp"))
    flush = ctx.flush_dst

    def post(r):
        if omod is not None:
            r = r * omod
        if clamp:
            r = r.clamp(0.0, 1.0)
            if ctx.dx10_clamp:
                r = torch.nan_to_num(r, nan=0.0)
        if flush:
            r = flush_denorms(r)
        return r
    return post, (omod is not None or clamp or flush)


def _f32_in(ctx):
    if ctx.flush_src:
        return lambda x: flush_denorms(as_f32(x))
    return as_f32


def _f32_op(ins, b, index):
    base, ops, ctx = ins.base, ins.operands, b.ctx
    _no_mods(ins, ("clamp", "omod"))
    fin = _f32_in(ctx)
    post, has_post = _f32_out(ins, ctx)
    dst = b.vdst(ops[0])
    if base in F32_TO_INT:
        if has_post and (ins.mods.get("omod") or ins.mods.get("clamp")):
            raise BindError("clamp/omod not modelled on float->int conversions")
        fn = F32_TO_INT[base]
        s0 = b.src(ops[1])

        def run(g):
            g.wv(dst, fn(fin(s0(g))))
        return Handler(ins, index, run, "valu", b)
    if base in ("v_fmac_f32", "v_mac_f32"):
        if len(ops) != 3:
            raise BindError("expected 3 operands")
        if base == "v_mac_f32":
            raise BindError("v_mac_f32 (unfused multiply-add) is not modelled")
        srcs = [b.src(ops[1]), b.src(ops[2]), b.src(ops[0])]  # d = a * b + d
        fn = fma_f32
    elif base == "v_fmaak_f32":  # d = a * b + K
        srcs = [b.src(ops[1]), b.src(ops[2]), b.src(ops[3])]
        fn = fma_f32
    elif base == "v_fmamk_f32":  # d = a * K + b
        srcs = [b.src(ops[1]), b.src(ops[2]), b.src(ops[3])]
        fn = fma_f32
    elif base == "v_ldexp_f32":
        s0, s1 = b.src(ops[1]), b.src(ops[2], float_mods=False)

        def run(g):
            r = post(_ldexp(fin(s0(g)), s1(g)))
            g.wv(dst, as_bits(r))
        return Handler(ins, index, run, "valu", b)
    else:
        n, fn = F32_OPS[base]
        if len(ops) != n + 1:
            raise BindError(f"expected {n + 1} operands")
        srcs = [b.src(op) for op in ops[1:]]
    if len(srcs) == 1:
        s0 = srcs[0]

        def run(g):
            r = fn(fin(s0(g)))
            g.wv(dst, as_bits(post(r) if has_post else r))
    elif len(srcs) == 2:
        s0, s1 = srcs

        def run(g):
            r = fn(fin(s0(g)), fin(s1(g)))
            g.wv(dst, as_bits(post(r) if has_post else r))
    else:
        s0, s1, s2 = srcs

        def run(g):
            r = fn(fin(s0(g)), fin(s1(g)), fin(s2(g)))
            g.wv(dst, as_bits(post(r) if has_post else r))
    return Handler(ins, index, run, "valu", b)


def _cmp(ins, b, index):
    base, ops, ctx = ins.base, ins.operands, b.ctx
    parts = base.split("_")  # v, cmp|cmpx, op, type
    if len(parts) != 4:
        raise BindError("unknown comparison")
    _, kind, op, typ = parts
    if typ in ("f32", "f16"):
        table = CMP_F32
    elif typ in ("i32", "u32", "i16", "u16"):
        table = CMP_INT
    else:
        raise BindError(f"comparisons of type {typ} are not modelled")
    if op not in table:
        raise BindError(f"comparison {op} not modelled for {typ}")
    if len(ops) != 3:
        raise BindError("expected 3 operands")
    if typ.endswith("16"):
        return _cmp16(ins, b, index, table[op], typ)
    _no_mods(ins)
    fn = table[op]
    dst = b.sdst(ops[0], 2)
    s0 = b.src(ops[1], float_mods=typ == "f32")
    s1 = b.src(ops[2], float_mods=typ == "f32")
    cmpx = kind == "cmpx"
    if cmpx:
        b.write_s(EXEC_LO, 2)
    fin = _f32_in(ctx)
    unsigned = typ == "u32"

    def run(g):
        a, c = s0(g), s1(g)
        if typ == "f32":
            a, c = fin(a), fin(c)
        elif unsigned:
            a, c = _ucmp(a), _ucmp(c)
        res = _lanes(fn(a, c), g.n)
        ex = g.exec_mask()
        if ex is not None:
            res = res & ex
        g.wlanemask(dst, res)
        if cmpx:
            g.wlanemask(EXEC_LO, res)
    return Handler(ins, index, run, "valu", b)


def _cmp16(ins, b, index, fn, typ):
    """16-bit comparisons: the low halves (op_sel picks a high half in the VOP3 form, src*_sel under SDWA); f16
    values compare exactly as f32, u16 / i16 as their zero- / sign-extended values."""
    _no_mods(ins, ("op_sel",))
    sel = ins.mods.get("op_sel", (0, 0, 0))
    if len(sel) > 2 and sel[2]:
        raise BindError("op_sel of a comparison's destination is not modelled")
    dst = b.sdst(ins.operands[0], 2)
    s0, s1 = (src16(b, op, bool(sel[i]) if i < len(sel) else False) for i, op in enumerate(ins.operands[1:]))
    cmpx = ins.base.startswith("v_cmpx")
    if cmpx:
        b.write_s(EXEC_LO, 2)
    if typ == "f16":
        value = f16_bits_to_f32
    elif typ == "i16":
        value = lambda x: ((x & 0xFFFF) ^ 0x8000) - 0x8000  # noqa: E731
    else:
        value = lambda x: x & 0xFFFF  # noqa: E731

    def run(g):
        res = _lanes(fn(value(s0(g)), value(s1(g))), g.n)
        ex = g.exec_mask()
        if ex is not None:
            res = res & ex
        g.wlanemask(dst, res)
        if cmpx:
            g.wlanemask(EXEC_LO, res)
    return Handler(ins, index, run, "valu", b)


def _carry_op(ins, b, index):
    base, ops = ins.base, ins.operands
    _no_mods(ins)
    with_carry_in = base in ("v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32")
    if len(ops) != (5 if with_carry_in else 4):
        raise BindError("unexpected operand count")
    dst = b.vdst(ops[0])
    cdst = b.sdst(ops[1], 2)
    s0, s1 = b.src(ops[2], float_mods=False), b.src(ops[3], float_mods=False)
    cin = b.ssrc_index(ops[4], 2) if with_carry_in else None

    def run(g):
        a, c = u32(s0(g)), u32(s1(g))
        ci = g.lanemask(cin).to(torch.int64) if cin is not None else 0
        if base in ("v_add_co_u32", "v_addc_co_u32"):
            full = a + c + ci
            carry = full > M32
        elif base in ("v_sub_co_u32", "v_subb_co_u32"):
            full = a - c - ci
            carry = full < 0
        else:  # subrev
            full = c - a - ci
            carry = full < 0
        carry = _lanes(carry, g.n)
        ex = g.exec_mask()
        g.wv(dst, _i32(full))
        g.wlanemask(cdst, carry if ex is None else carry & ex)
    return Handler(ins, index, run, "valu", b)


def _cndmask(ins, b, index):
    ops = ins.operands
    _no_mods(ins)
    if len(ops) != 4:
        raise BindError("expected 4 operands")
    dst = b.vdst(ops[0])
    s0, s1 = b.src(ops[1]), b.src(ops[2])
    sel = b.ssrc_index(ops[3], 2)

    def run(g):
        g.wv(dst, torch.where(g.lanemask(sel), s1(g), s0(g)))
    return Handler(ins, index, run, "valu", b)


def _shift64(ins, b, index):
    base, ops = ins.base, ins.operands
    _no_mods(ins)
    dst = b.vdst(ops[0], 2)
    amount = b.src(ops[1], float_mods=False)
    lo, hi = b.src_pair(ops[2])

    def run(g):
        s = amount(g)
        if base == "v_lshlrev_b64":
            rlo, rhi = _shl64(lo(g), hi(g), s)
        else:
            rlo, rhi = _shr64(lo(g), hi(g), s, arith=base == "v_ashrrev_i64")
        g.wvs(dst, torch.stack((rlo.expand(g.n, 64), rhi.expand(g.n, 64))))
    return Handler(ins, index, run, "valu", b)


def _mov64(ins, b, index):
    ops = ins.operands
    dst = b.vdst(ops[0], 2)
    if ins.base == "v_mov_b64":
        _no_mods(ins)
        lo, hi = b.src_pair(ops[1])
        pick = lambda g: (lo(g), hi(g))  # noqa: E731
    else:  # v_pk_mov_b32: low result from src0 (op_sel[0] picks its high dword), high result from src1
        _no_mods(ins, ("op_sel", "op_sel_hi"))
        sel = ins.mods.get("op_sel", (0, 0))
        a, c = b.src_pair(ops[1]), b.src_pair(ops[2])
        pick = lambda g: (a[sel[0]](g), c[sel[1]](g))  # noqa: E731

    def run(g):
        x, y = pick(g)
        x, y = (v.expand(g.n, 64) for v in (x, y))
        g.wvs(dst, torch.stack((x, y)))
    return Handler(ins, index, run, "valu", b)


def _lane_access(ins, b, index):
    base, ops = ins.base, ins.operands
    _no_mods(ins)
    if base == "v_readfirstlane_b32":
        dst = b.sdst(ops[0], 1)
        src = b.vsrc_index(ops[1], 1)

        def run(g):
            ex = g.exec_mask()
            v = g.rv(src)
            if ex is None:
                lane = torch.zeros(g.n, dtype=torch.int64, device=v.device)
            else:  # first active lane; lane 0 when EXEC is 0
                lane = torch.where(ex.any(1), ex.to(torch.int8).argmax(1), 0)
            g.ws(dst, u32(v.gather(1, lane.view(-1, 1)).squeeze(1)))
        return Handler(ins, index, run, "valu", b)
    if base == "v_readlane_b32":
        dst = b.sdst(ops[0], 1)
        src = b.vsrc_index(ops[1], 1)
        lane_sel = b.src(ops[2], float_mods=False)

        def run(g):
            lane = (lane_sel(g).to(torch.int64) & 63).expand(g.n, 1)
            g.ws(dst, u32(g.rv(src).gather(1, lane).squeeze(1)))
        return Handler(ins, index, run, "valu", b)
    # v_writelane_b32 vdst, ssrc, lane: writes one lane regardless of EXEC; the other lanes keep their value, so it
    # reads vdst too (LLVM ties vdst_in to it)
    dst = b.vdst(ops[0], 1)
    b.vsrc_index(ops[0], 1)
    val = b.src(ops[1], float_mods=False)
    lane_sel = b.src(ops[2], float_mods=False)
    lanes = torch.arange(64, dtype=torch.int64)

    def run(g):
        lane = (lane_sel(g).to(torch.int64) & 63).expand(g.n, 1)
        g.wv(dst, val(g), mask=lanes.to(lane.device).view(1, 64) == lane)
    return Handler(ins, index, run, "valu", b)


def _mbcnt(ins, b, index):
    ops = ins.operands
    _no_mods(ins)
    dst = b.vdst(ops[0])
    s0, s1 = b.src(ops[1], float_mods=False), b.src(ops[2], float_mods=False)
    hi = ins.base == "v_mbcnt_hi_u32_b32"
    lane = torch.arange(64, dtype=torch.int64)
    below = lane - 32 if hi else lane  # how many bits of this half lie below the lane
    bit = torch.arange(32, dtype=torch.int64)
    # [64, 32] bool: bit j of the 32-bit mask counts for lane l
    counts_for = bit.view(1, 32) < below.clamp(0, 32).view(64, 1)

    def run(g):
        v = u32(s0(g))
        bits = ((v.unsqueeze(-1) >> bit.to(v.device)) & 1).bool()  # [.., 1|64, 32]
        cnt = (bits & counts_for.to(v.device)).sum(-1)
        g.wv(dst, _i32(cnt + u32(s1(g))))
    return Handler(ins, index, run, "valu", b)


def _convert16(ins, b, index):
    base, ops, ctx = ins.base, ins.operands, b.ctx
    dst = b.vdst(ops[0])
    sel = ins.mods.get("op_sel", (0, 0, 0, 0))
    if base == "v_cvt_f32_f16":
        _no_mods(ins, ("clamp", "omod"))
        src = src16(b, ops[1], bool(sel[0]))
        post, has_post = _f32_out(ins, ctx)

        def run(g):
            g.wv(dst, as_bits(post(f16_bits_to_f32(src(g)))))
        return Handler(ins, index, run, "valu", b)
    if base == "v_cvt_f32_bf16":
        _no_mods(ins, ())
        src = src16(b, ops[1], bool(sel[0]))

        def run(g):
            g.wv(dst, src(g) << 16)
        return Handler(ins, index, run, "valu", b)
    if base == "v_cvt_f16_f32":
        _no_mods(ins, ())
        src = b.src(ops[1])
        fin = _f32_in(ctx)

        def run(g):  # f16 result in [15:0]; bits [31:16] are zeroed
            g.wv(dst, f32_to_f16_bits(fin(src(g))))
        return Handler(ins, index, run, "valu", b)
    if base in ("v_cvt_pkrtz_f16_f32", "v_cvt_pk_bf16_f32", "v_cvt_pk_f16_f32"):
        _no_mods(ins, ())
        if base == "v_cvt_pk_bf16_f32" and not ctx.arch.has_cvt_pk_bf16_f32 or \
                base == "v_cvt_pk_f16_f32" and not ctx.arch.has_cvt_pk_f16_f32:
            raise BindError(f"{base} does not exist on {ctx.arch.name}")
        s0, s1 = b.src(ops[1]), b.src(ops[2])
        fin = _f32_in(ctx)
        # v_cvt_pk_f16_f32 rounds as v_cvt_f16_f32 (to nearest even, the MODE register's default)
        conv = {"v_cvt_pkrtz_f16_f32": f32_to_f16_rtz_bits, "v_cvt_pk_bf16_f32": f32_to_bf16_bits,
                "v_cvt_pk_f16_f32": f32_to_f16_bits}[base]

        def run(g):
            g.wv(dst, conv(fin(s0(g))) | (conv(fin(s1(g))) << 16))
        return Handler(ins, index, run, "valu", b)
    # v_pack_b32_f16 D = {S1.f16, S0.f16}
    _no_mods(ins, ("op_sel",))
    lo = src16(b, ops[1], bool(sel[0]))
    hi = src16(b, ops[2], bool(sel[1]))

    def run(g):
        g.wv(dst, lo(g) | (hi(g) << 16))
    return Handler(ins, index, run, "valu", b)


def _packed_sel(ins, n):
    m = ins.mods
    return (m.get("op_sel", (0,) * n), m.get("op_sel_hi", (1,) * n), m.get("neg_lo", (0,) * n),
            m.get("neg_hi", (0,) * n))


def _packed16(ins, b, index):
    base, ops, ctx = ins.base, ins.operands, b.ctx
    n, fn = PK_F16[base]
    _no_mods(ins, ("op_sel", "op_sel_hi", "neg_lo", "neg_hi", "clamp"))
    if len(ops) != n + 1:
        raise BindError(f"expected {n + 1} operands")
    sel, sel_hi, neg_lo, neg_hi = _packed_sel(ins, n)
    clamp = bool(ins.mods.get("clamp"))
    dst = b.vdst(ops[0])
    lo_src, hi_src = [], []
    for i, op in enumerate(ops[1:]):
        if isinstance(op, Reg) and (op.neg or op.abs):
            raise BindError("packed operands take neg_lo/neg_hi, not -x/|x|")
        lo_src.append(_neg16(src16(b, op, bool(sel[i])), neg_lo[i]))
        hi_src.append(_neg16(src16(b, op, bool(sel_hi[i])), neg_hi[i]))

    def half(srcs, g):
        vals = [f16_bits_to_f32(s(g)) for s in srcs]
        if fn is None:  # fma: exact f64 sum rounded to odd at f32, then RNE to f16 = one rounding
            r = f64_to_f32_odd(fma_f64_odd(*(v.double() for v in vals)))
        else:
            r = fn(*vals)
        if clamp:
            r = r.clamp(0.0, 1.0)
        return f32_to_f16_bits(r)

    def run(g):
        g.wv(dst, half(lo_src, g) | (half(hi_src, g) << 16))
    return Handler(ins, index, run, "valu", b)


def _neg16(read, neg):
    if not neg:
        return read
    return lambda g: read(g) ^ 0x8000


def _packed32(ins, b, index):
    base, ops, ctx = ins.base, ins.operands, b.ctx
    n, fn = PK_F32[base]
    _no_mods(ins, ("op_sel", "op_sel_hi", "neg_lo", "neg_hi", "clamp"))
    if ins.mods.get("clamp"):
        raise BindError("clamp on packed f32 ops is not modelled")
    sel, sel_hi, neg_lo, neg_hi = _packed_sel(ins, n)
    dst = b.vdst(ops[0], 2)
    fin = _f32_in(ctx)
    post, has_post = _f32_out(ins, ctx)
    lo_src, hi_src = [], []
    for i, op in enumerate(ops[1:]):
        if isinstance(op, Const):
            low = b.ctx.const_tensor(op.bits)
            high = b.ctx.const_tensor(0 if op.kind == "float" else op.bits64() >> 32)
            pair = (lambda g, c=low: c, lambda g, c=high: c)
        else:
            pair = b.src_pair(op)
        lo_src.append(_neg32(pair[sel[i]], neg_lo[i]))
        hi_src.append(_neg32(pair[sel_hi[i]], neg_hi[i]))

    def run(g):
        lo = fn(*(fin(s(g)) for s in lo_src))
        hi = fn(*(fin(s(g)) for s in hi_src))
        if has_post:
            lo, hi = post(lo), post(hi)
        lo, hi = (as_bits(v).expand(g.n, 64) for v in (lo, hi))
        g.wvs(dst, torch.stack((lo, hi)))
    return Handler(ins, index, run, "valu", b)


def _neg32(read, neg):
    if not neg:
        return read
    return lambda g: read(g) ^ INT_MIN


def _accvgpr(ins, b, index):
    ops = ins.operands
    _no_mods(ins)
    if ins.base == "v_accvgpr_read_b32":
        if not (isinstance(ops[1], Reg) and ops[1].kind == "a"):
            raise BindError("v_accvgpr_read_b32 reads an AGPR")
    if ins.base in ("v_accvgpr_write_b32", "v_accvgpr_mov_b32"):
        if not (isinstance(ops[0], Reg) and ops[0].kind == "a"):
            raise BindError(f"{ins.base} writes an AGPR")
    dst = b.vdst(ops[0])
    src = b.src(ops[1], float_mods=False)

    def run(g):
        g.wv(dst, src(g))
    return Handler(ins, index, run, "valu", b)

