"""VALU instructions other compilers emit (LLVM for Triton and HIP) beyond tilegcn's own: 64-bit integer
multiply-add and shift-add, bit scans, fp32 division (div_scale / div_fmas / div_fixup), class tests,
64-bit compares, 16-bit float and integer ops, mixed-precision FMA, and the CDNA4 additions
(v_bitop3_b32, v_maximum3/minimum3_f32, v_cvt_pk_f16_f32, v_permlane16/32_swap_b32).

Semantics follow the CDNA3 / CDNA4 ISA guides' pseudo-code. Choices where they leave room:
  * 16-bit results of VOP1/VOP2/VOP3 ops zero bits [31:16] unless op_sel[3] (destination high half) is
    set, which writes [31:16] and keeps [15:0] (LLVM's model of GFX9: `zeroesHigh16BitsOfDest`).
  * f16 arithmetic keeps f16 denormals (FLOAT_DENORM_MODE_16_64 = 3, LLVM's default); a descriptor that
    flushes them is refused at bind time rather than run with the wrong rounding.
  * v_rcp_iflag_f32 returns the correctly rounded reciprocal; the hardware's is within 1 ulp, which every LLVM
    division sequence (integer udiv/urem) is built to tolerate. v_rcp_f32 is modelled within 1 ulp, without
    denormals, as the other transcendentals (ops_valu.py, docs/isa-notes.md).
  * Which lanes a v_permlane*_swap writes: a lane is written when it is active in EXEC (the guide does
    not say; LLVM only emits them under full EXEC).
"""
from __future__ import annotations

import torch

from .decode import EXEC_LO, VCC_LO, Const, Reg
from .fpmath import FLT_MIN, f16_bits_to_f32, f32_to_f16_bits, f64_to_f32_odd, fma_f64_odd, flush_denorms
from .ops_f64 import div_fixup
from .program import BindError, Handler, as_bits, as_f32, u32
from .state import Fault

M32 = 0xFFFFFFFF
SIGN64 = -(1 << 63)


def _i32(x):
    return (x & M32).to(torch.int32)


def _pair64(lo, hi):
    """int32 bits (lo, hi) -> int64 holding the 64-bit pattern."""
    return u32(lo) | (hi.to(torch.int64) << 32)


def _write64(g, dst, v):
    lo, hi = _i32(v), _i32(v >> 32)
    g.wvs(dst, torch.stack((lo.expand(g.n, 64), hi.expand(g.n, 64))))


def _lanes(mask, g):
    return mask.expand(g.n, 64)


def _exec_and(g, mask):
    ex = g.exec_mask()
    mask = _lanes(mask, g)
    return mask if ex is None else mask & ex


def _no_mods(ins, allowed=()):
    bad = [k for k in ins.mods if k not in allowed]
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {ins.base}")


def _expect(ins, n):
    if len(ins.operands) != n:
        raise BindError(f"expected {n} operands")


# ---- bit scans ------------------------------------------------------------------------------------------------
def _highest_bit(v):
    """Index of the highest set bit of a non-negative int64 (< 2^53), -1 for 0."""
    _, e = torch.frexp(v.to(torch.float64))
    return torch.where(v == 0, -1, e.to(torch.int64) - 1)


def _ffbh_u32(a):  # leading zeros counted from bit 31; -1 (0xFFFFFFFF) when no bit is set
    h = _highest_bit(u32(a))
    return _i32(torch.where(h < 0, -1, 31 - h))


def _ffbl_b32(a):  # trailing zeros; -1 when no bit is set
    x = u32(a)
    return _i32(_highest_bit(x & -x))


def _ffbh_i32(a):  # first bit that differs from the sign bit, counted from bit 31; -1 for 0 and -1
    x = u32(torch.where(a < 0, ~a, a))
    h = _highest_bit(x)
    return _i32(torch.where(h < 0, -1, 31 - h))


def _bcnt(a, b):
    x = u32(a)
    x = x - ((x >> 1) & 0x55555555)
    x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F
    return _i32(((x * 0x01010101) & M32) >> 24) + b


SCAN_OPS = {"v_ffbh_u32": (1, _ffbh_u32), "v_ffbl_b32": (1, _ffbl_b32), "v_ffbh_i32": (1, _ffbh_i32),
            "v_bcnt_u32_b32": (2, _bcnt)}


def _scan(ins, b, index):
    n, fn = SCAN_OPS[ins.base]
    _expect(ins, n + 1)
    _no_mods(ins)
    dst = b.vdst(ins.operands[0])
    srcs = [b.src(op, float_mods=False) for op in ins.operands[1:]]

    def run(g):
        g.wv(dst, fn(*(s(g) for s in srcs)))
    return Handler(ins, index, run, "valu", b)


# ---- 64-bit integer -------------------------------------------------------------------------------------------
def _lshl_add_u64(ins, b, index):
    """D.u64 = (S0.u64 << S1.u[2:0]) + S2.u64 (CDNA3 guide: shift amounts 0..4 are the documented ones; the
    field is three bits wide)."""
    _expect(ins, 4)
    _no_mods(ins)
    dst = b.vdst(ins.operands[0], 2)
    a = b.src_pair(ins.operands[1])
    sh = b.src(ins.operands[2], float_mods=False)
    c = b.src_pair(ins.operands[3])

    def run(g):
        _write64(g, dst, (_pair64(a[0](g), a[1](g)) << (sh(g).to(torch.int64) & 7)) + _pair64(c[0](g), c[1](g)))
    return Handler(ins, index, run, "valu", b)


def _mad64(ins, b, index):
    """{carry, D.u64} = 65-bit S0 * S1 + S2 (u32 x u32 + u64, or i32 x i32 + i64 sign-extended to 65 bits);
    the carry is bit 64 of that 65-bit result, written to the SGPR-pair lane mask."""
    _expect(ins, 5)
    _no_mods(ins, ("clamp",))
    if ins.mods.get("clamp"):
        raise BindError("clamp on 64-bit multiply-add is not modelled")
    signed = ins.base == "v_mad_i64_i32"
    dst = b.vdst(ins.operands[0], 2)
    cdst = b.sdst(ins.operands[1], 2)
    s0 = b.src(ins.operands[2], float_mods=False)
    s1 = b.src(ins.operands[3], float_mods=False)
    s2 = b.src_pair(ins.operands[4])

    def run(g):
        c = _pair64(s2[0](g), s2[1](g))
        if signed:
            p = s0(g).to(torch.int64) * s1(g).to(torch.int64)  # |p| <= 2^62: exact
            r = p + c
            overflow = ((p >= 0) & (c >= 0) & (r < 0)) | ((p < 0) & (c < 0) & (r >= 0))
            carry = (r < 0) ^ overflow  # bit 64 = sign of the exact 65-bit sum
        else:
            a, bb = u32(s0(g)), u32(s1(g))
            # exact 64-bit product from 32x16 partial products (int64 wraps like the hardware)
            p = a * (bb & 0xFFFF) + ((a * (bb >> 16)) << 16)
            r = p + c
            carry = (r ^ SIGN64) < (c ^ SIGN64)  # unsigned r < unsigned c: the add wrapped
        _write64(g, dst, r)
        g.wlanemask(cdst, _exec_and(g, carry))
    return Handler(ins, index, run, "valu", b)


def _cmp64(ins, b, index):
    _, kind, op, typ = ins.base.split("_")
    ops = {"f": None, "lt": torch.lt, "eq": torch.eq, "le": torch.le, "gt": torch.gt, "ne": torch.ne,
           "lg": torch.ne, "ge": torch.ge, "t": None}
    if op not in ops or op in ("f", "t"):
        raise BindError(f"64-bit comparison {op} not modelled")
    _expect(ins, 3)
    _no_mods(ins)
    fn = ops[op]
    dst = b.sdst(ins.operands[0], 2)
    a, c = b.src_pair(ins.operands[1]), b.src_pair(ins.operands[2])
    flip = SIGN64 if typ == "u64" else 0  # unsigned order under signed comparison
    cmpx = kind == "cmpx"
    if cmpx:
        b.write_s(EXEC_LO, 2)

    def run(g):
        x, y = _pair64(a[0](g), a[1](g)) ^ flip, _pair64(c[0](g), c[1](g)) ^ flip
        res = _exec_and(g, fn(x, y))
        g.wlanemask(dst, res)
        if cmpx:
            g.wlanemask(EXEC_LO, res)
    return Handler(ins, index, run, "valu", b)


# ---- fp32 division --------------------------------------------------------------------------------------------
def _exp_field(x):
    return (as_bits(x) >> 23) & 0xFF


def _ldexp64(x, k):
    return (x.double() * 2.0 ** k).float()


def div_scale_f32(s0, s1, s2):
    """(D, VCC) of V_DIV_SCALE_F32 (CDNA3 guide pseudo-code): S0 is the value to scale (the numerator or the
    denominator), S1 the denominator, S2 the numerator. Scales by 2^+-64 where N/D would lose precision."""
    e1, e2 = _exp_field(s1), _exp_field(s2)
    d1, d2 = s1.double(), s2.double()
    rcp_denorm = (1.0 / d1).abs() < FLT_MIN
    q = (d2 / d1).abs()
    q_denorm = (q < FLT_MIN) & (q > 0)
    up, down = _ldexp64(s0, 64), _ldexp64(s0, -64)
    d, vcc = s0, torch.zeros_like(s0, dtype=torch.bool)
    # the guide's if / else-if chain, applied from the last case to the first so earlier cases win
    d = torch.where(e2 <= 23, up, d)
    case = q_denorm
    d, vcc = torch.where(case & (s0 == s2), up, torch.where(case, s0, d)), vcc | case
    case = rcp_denorm
    d, vcc = torch.where(case, down, d), vcc & ~case
    case = rcp_denorm & q_denorm  # only the denominator is scaled (down): the quotient comes out 2^64 too big
    d, vcc = torch.where(case & (s0 == s1), down, torch.where(case, s0, d)), vcc | case
    case = (e1 == 0) & (s1 != 0)  # denormal denominator
    d, vcc = torch.where(case, up, d), vcc & ~case
    case = (e2 - e1) >= 96  # N/D near the largest float
    d, vcc = torch.where(case & (s0 == s1), up, torch.where(case, s0, d)), vcc | case
    case = (s2 == 0) | (s1 == 0)
    d, vcc = torch.where(case, torch.full_like(s0, float("nan")), d), vcc & ~case
    return d, vcc


def div_fmas_f32(s0, s1, s2, vcc):
    """V_DIV_FMAS_F32: fma(S0, S1, S2), scaled by 2^64 (|S2| >= 2) or 2^-64 in lanes whose VCC is set, with
    one rounding (the scale is applied to the exact sum before rounding to f32)."""
    r = fma_f64_odd(s0.double(), s1.double(), s2.double())
    scale = torch.where(_exp_field(s2) > 127, 2.0 ** 64, 2.0 ** -64).to(torch.float64)
    return torch.where(vcc, r * scale, r).float()


def div_fixup_f32(s0, s1, s2):
    """V_DIV_FIXUP_F32: S0 the quotient, S1 the denominator, S2 the numerator; IEEE special cases."""
    neg = (as_bits(s1) ^ as_bits(s2)) < 0
    inf = torch.where(neg, -float("inf"), float("inf")).to(torch.float32)
    zero = torch.where(neg, -0.0, 0.0).to(torch.float32)
    nan = torch.full_like(s0, float("nan"))
    out = torch.where(neg, -s0.abs(), s0.abs())
    out = torch.where((_exp_field(s2) - _exp_field(s1)) < -150, zero, out)
    out = torch.where(s1.isinf() | (s2 == 0), zero, out)
    out = torch.where((s1 == 0) | s2.isinf(), inf, out)
    out = torch.where(s1.isinf() & s2.isinf(), nan, out)
    out = torch.where((s1 == 0) & (s2 == 0), nan, out)
    out = torch.where(s1.isnan(), s1, out)
    return torch.where(s2.isnan(), s2, out)


def _f32_in(ctx):
    return (lambda x: flush_denorms(as_f32(x))) if ctx.flush_src else as_f32


def _f32_post(ctx):
    return flush_denorms if ctx.flush_dst else (lambda r: r)


def _fdiv(ins, b, index):
    base, ops, ctx = ins.base, ins.operands, b.ctx
    _no_mods(ins)
    fin, post = _f32_in(ctx), _f32_post(ctx)
    if base == "v_div_scale_f32":
        _expect(ins, 5)
        dst, vdst = b.vdst(ops[0]), b.sdst(ops[1], 2)
        s = [b.src(op) for op in ops[2:]]

        def run(g):
            d, vcc = div_scale_f32(*(fin(r(g)) for r in s))
            g.wv(dst, as_bits(post(d)))
            g.wlanemask(vdst, _exec_and(g, vcc))
        return Handler(ins, index, run, "valu", b)
    _expect(ins, 4)
    dst = b.vdst(ops[0])
    s = [b.src(op) for op in ops[1:]]
    if base == "v_div_fixup_f32":
        def run(g):
            g.wv(dst, as_bits(post(div_fixup_f32(*(fin(r(g)) for r in s)))))
        return Handler(ins, index, run, "valu", b)
    b.read_s(VCC_LO, 2)  # v_div_fmas_f32 reads VCC implicitly

    def run(g):
        r = div_fmas_f32(*(fin(r(g)) for r in s), g.lanemask(VCC_LO))
        g.wv(dst, as_bits(post(r)))
    return Handler(ins, index, run, "valu", b)


# ---- class test ------------------------------------------------------------------------------------------------
def class_mask_f32(x_bits):
    """The V_CMP_CLASS bit (0..9) each f32 value belongs to: signaling NaN, quiet NaN, -inf, -normal,
    -denormal, -0, +0, +denormal, +normal, +inf. The raw input is classified (no denormal flush)."""
    e = (x_bits >> 23) & 0xFF
    mant = x_bits & 0x7FFFFF
    neg = x_bits < 0
    cls = torch.where(neg, 3, 8)  # normal
    cls = torch.where((e == 0) & (mant != 0), torch.where(neg, 4, 7), cls)
    cls = torch.where((e == 0) & (mant == 0), torch.where(neg, 5, 6), cls)
    cls = torch.where((e == 255) & (mant == 0), torch.where(neg, 2, 9), cls)
    cls = torch.where((e == 255) & (mant != 0), torch.where((mant >> 22) == 1, 1, 0), cls)
    return cls


def _cmp_class(ins, b, index):
    if not ins.base.endswith("_f32"):
        raise BindError(f"{ins.base}: only the f32 class test is modelled")
    _expect(ins, 3)
    _no_mods(ins)
    dst = b.sdst(ins.operands[0], 2)
    x = b.src(ins.operands[1])
    mask = b.src(ins.operands[2], float_mods=False)
    cmpx = ins.base.startswith("v_cmpx")
    if cmpx:
        b.write_s(EXEC_LO, 2)

    def run(g):
        res = _exec_and(g, ((mask(g) >> class_mask_f32(x(g))) & 1) == 1)
        g.wlanemask(dst, res)
        if cmpx:
            g.wlanemask(EXEC_LO, res)
    return Handler(ins, index, run, "valu", b)


# ---- 16-bit ---------------------------------------------------------------------------------------------------
def src16(b, op, sel_hi=False):
    """Reader of one 16-bit half of a 32-bit operand (bits [15:0] of the result), with f16 neg/abs on bit 15.
    A constant as a 16-bit / packed operand sees it: inline floats are f16 in the low half and 0 in the high
    half; integers keep their 32-bit pattern."""
    if isinstance(op, Const):
        word = op.bits16() if op.kind == "float" else op.bits
        c = b.ctx.const_tensor((word >> 16) & 0xFFFF if sel_hi else word & 0xFFFF)
        return lambda g: c
    if not isinstance(op, Reg):
        raise BindError(f"16-bit operand {op!r} not supported")
    raw = b.src(Reg(op.kind, op.index, op.count, False, False, op.text))
    read = (lambda g: (raw(g) >> 16) & 0xFFFF) if sel_hi else (lambda g: raw(g) & 0xFFFF)
    if op.abs:
        plain = read
        read = lambda g: plain(g) & 0x7FFF  # noqa: E731
    if op.neg:
        pos = read
        read = lambda g: pos(g) ^ 0x8000  # noqa: E731
    return read


def _fma16(a, b, c):
    return f64_to_f32_odd(fma_f64_odd(a.double(), b.double(), c.double()))


F16_OPS = {  # computed in f32 from exact f16 inputs, rounded once to f16
    "v_add_f16": (2, lambda a, b: a + b), "v_sub_f16": (2, lambda a, b: a - b),
    "v_subrev_f16": (2, lambda a, b: b - a), "v_mul_f16": (2, lambda a, b: a * b),
    "v_max_f16": (2, torch.fmax), "v_min_f16": (2, torch.fmin), "v_fma_f16": (3, _fma16),
    "v_fmac_f16": (3, _fma16),
    # the special cases of an f16 quotient (LLVM's fdiv half: an f32 reciprocal, then this): exact in f32
    "v_div_fixup_f16": (3, lambda q, den, num: div_fixup(q, den, num, None, None)),
}
U16_OPS = {
    "v_add_u16": (2, lambda a, b: a + b), "v_sub_u16": (2, lambda a, b: a - b),
    "v_subrev_u16": (2, lambda a, b: b - a), "v_mul_lo_u16": (2, lambda a, b: a * b),
    "v_lshlrev_b16": (2, lambda a, b: b << (a & 15)), "v_lshrrev_b16": (2, lambda a, b: b >> (a & 15)),
    "v_ashrrev_i16": (2, lambda a, b: _sext16(b) >> (a & 15)),
    "v_max_u16": (2, torch.maximum), "v_min_u16": (2, torch.minimum),
    "v_max_i16": (2, lambda a, b: torch.maximum(_sext16(a), _sext16(b))),
    "v_min_i16": (2, lambda a, b: torch.minimum(_sext16(a), _sext16(b))),
}


def _sext16(x):
    return ((x & 0xFFFF) ^ 0x8000) - 0x8000


def _op16(ins, b, index):
    base, ops, ctx = ins.base, ins.operands, b.ctx
    is_float = base in F16_OPS
    n, fn = (F16_OPS if is_float else U16_OPS)[base]
    if is_float and ctx.kd.float_denorm_mode_16_64 != 3:
        raise BindError("f16 ops under a descriptor that flushes f16 denormals are not modelled")
    _no_mods(ins, ("op_sel", "clamp"))
    if ins.mods.get("clamp"):
        raise BindError(f"clamp on {base} is not modelled")
    sel = ins.mods.get("op_sel", (0,) * 4)
    mac = base == "v_fmac_f16"
    _expect(ins, n if mac else n + 1)
    dst = b.vdst(ops[0])
    src_ops = list(ops[1:]) + ([ops[0]] if mac else [])
    srcs = [src16(b, op, bool(sel[i]) if i < len(sel) - 1 else False) for i, op in enumerate(src_ops)]
    dst_hi = bool(sel[-1]) if len(sel) == n + 1 else False

    def compute(g):
        if is_float:
            return f32_to_f16_bits(fn(*(f16_bits_to_f32(s(g)) for s in srcs)).float())
        return fn(*(s(g) for s in srcs)) & 0xFFFF

    if dst_hi:
        def run(g):
            g.wv(dst, (g.rv(dst) & 0xFFFF) | (compute(g) << 16))
    else:
        def run(g):
            g.wv(dst, compute(g))
    return Handler(ins, index, run, "valu", b)


def _fma_mix(ins, b, index):
    """v_fma_mix_f32 / v_fma_mixlo_f16 / v_fma_mixhi_f16: each source is f32 (op_sel_hi[i] = 0) or the f16
    half op_sel[i] picks; one fused rounding to f32 (mix_f32) or f16 (mixlo/mixhi, which keep the other
    half of the destination)."""
    ops, ctx = ins.operands, b.ctx
    _no_mods(ins, ("op_sel", "op_sel_hi", "clamp"))
    if ins.mods.get("clamp"):
        raise BindError(f"clamp on {ins.base} is not modelled")
    _expect(ins, 4)
    sel = ins.mods.get("op_sel", (0, 0, 0))
    sel_hi = ins.mods.get("op_sel_hi", (0, 0, 0))
    dst = b.vdst(ops[0])
    fin = _f32_in(ctx)
    srcs = []
    for i, op in enumerate(ops[1:]):
        if sel_hi[i]:
            h = src16(b, op, bool(sel[i]))
            srcs.append(lambda g, h=h: f16_bits_to_f32(h(g)))
        else:
            r = b.src(op)
            srcs.append(lambda g, r=r: fin(r(g)))
    exact = lambda g: fma_f64_odd(*(s(g).double() for s in srcs))  # noqa: E731
    if ins.base == "v_fma_mix_f32":
        post = _f32_post(ctx)

        def run(g):
            g.wv(dst, as_bits(post(exact(g).float())))
    else:
        hi = ins.base == "v_fma_mixhi_f16"

        def run(g):
            h = f32_to_f16_bits(f64_to_f32_odd(exact(g)))
            old = g.rv(dst)
            g.wv(dst, (old & 0xFFFF) | (h << 16) if hi else (old & -65536) | h)
    return Handler(ins, index, run, "valu", b)


# ---- packed conversions and packed 16-bit integers ----------------------------------------------------------------
def _sat(x, lo, hi):
    return x.clamp(lo, hi) & 0xFFFF


def _norm16(x, scale, lo):
    x = torch.nan_to_num(x, nan=0.0)
    return torch.round(x.clamp(lo, 1.0).double() * scale).to(torch.int64) & 0xFFFF  # torch.round: ties to even


PK_CVT = {  # (float sources, fn(source) -> 16-bit value as int64)
    "v_cvt_pk_u16_u32": (False, lambda a: _sat(u32(a), 0, 65535)),
    "v_cvt_pk_i16_i32": (False, lambda a: _sat(a.to(torch.int64), -32768, 32767)),
    "v_cvt_pknorm_i16_f32": (True, lambda x: _norm16(x, 32767.0, -1.0)),
    "v_cvt_pknorm_u16_f32": (True, lambda x: _norm16(x, 65535.0, 0.0)),
}


def _cvt_pk(ins, b, index):
    """D = {cvt(S1), cvt(S0)}: S0's 16-bit result in bits [15:0], S1's in [31:16] (saturating / normalising as
    the name says; norm conversions round to nearest even)."""
    _expect(ins, 3)
    _no_mods(ins)
    is_float, fn = PK_CVT[ins.base]
    fin = _f32_in(b.ctx) if is_float else (lambda x: x)
    dst = b.vdst(ins.operands[0])
    s0, s1 = (b.src(op, float_mods=is_float) for op in ins.operands[1:])

    def run(g):
        g.wv(dst, _i32(fn(fin(s0(g))) | (fn(fin(s1(g))) << 16)))
    return Handler(ins, index, run, "valu", b)


def _cvt_pk_u8(ins, b, index):
    """v_cvt_pk_u8_f32 D, S0, S1, S2: S2 with byte S1[1:0] replaced by S0 converted to u8 (round to nearest
    even, clamped to 0..255, NaN -> 0)."""
    _expect(ins, 4)
    _no_mods(ins)
    fin = _f32_in(b.ctx)
    dst = b.vdst(ins.operands[0])
    s0 = b.src(ins.operands[1])
    s1, s2 = (b.src(op, float_mods=False) for op in ins.operands[2:])

    def run(g):
        v = torch.round(torch.nan_to_num(fin(s0(g)), nan=0.0).clamp(0.0, 255.0)).to(torch.int64)
        shift = (u32(s1(g)) & 3) * 8
        old = u32(s2(g))
        g.wv(dst, _i32((old & ~(0xFF << shift)) | (v << shift)))
    return Handler(ins, index, run, "valu", b)


PK_INT = {  # on int64 16-bit fields (unsigned 0..65535); results masked to 16 bits
    "v_pk_add_u16": (2, lambda a, c: a + c), "v_pk_add_i16": (2, lambda a, c: a + c),
    "v_pk_sub_u16": (2, lambda a, c: a - c), "v_pk_sub_i16": (2, lambda a, c: a - c),
    "v_pk_mul_lo_u16": (2, lambda a, c: a * c),
    "v_pk_lshlrev_b16": (2, lambda a, c: c << (a & 15)), "v_pk_lshrrev_b16": (2, lambda a, c: c >> (a & 15)),
    "v_pk_ashrrev_i16": (2, lambda a, c: _sext16(c) >> (a & 15)),
    "v_pk_max_u16": (2, torch.maximum), "v_pk_min_u16": (2, torch.minimum),
    "v_pk_max_i16": (2, lambda a, c: torch.maximum(_sext16(a), _sext16(c))),
    "v_pk_min_i16": (2, lambda a, c: torch.minimum(_sext16(a), _sext16(c))),
    "v_pk_mad_u16": (3, lambda a, c, d: a * c + d), "v_pk_mad_i16": (3, lambda a, c, d: a * c + d),
}


def _pk_int(ins, b, index):
    n, fn = PK_INT[ins.base]
    _expect(ins, n + 1)
    _no_mods(ins, ("op_sel", "op_sel_hi"))
    sel = ins.mods.get("op_sel", (0,) * n)
    sel_hi = ins.mods.get("op_sel_hi", (1,) * n)
    dst = b.vdst(ins.operands[0])
    lo = [src16(b, op, bool(sel[i])) for i, op in enumerate(ins.operands[1:])]
    hi = [src16(b, op, bool(sel_hi[i])) for i, op in enumerate(ins.operands[1:])]

    def run(g):
        r_lo = fn(*(s(g).to(torch.int64) for s in lo)) & 0xFFFF
        r_hi = fn(*(s(g).to(torch.int64) for s in hi)) & 0xFFFF
        g.wv(dst, _i32(r_lo | (r_hi << 16)))
    return Handler(ins, index, run, "valu", b)


# ---- CDNA4 -----------------------------------------------------------------------------------------------------
def _bitop3(ins, b, index):
    """v_bitop3_b32 / _b16: bit i of D is bit ((S0[i] << 2) | (S1[i] << 1) | S2[i]) of the 8-bit truth table (llc
    22 selects bitop3:0xf8 for `a | (b & c)`). The b16 form writes the low half and clears the high one, as the
    other 16-bit VALU ops without op_sel here."""
    _expect(ins, 4)
    _no_mods(ins, ("bitop3",))
    table = int(ins.mods.get("bitop3", 0))
    half = ins.base == "v_bitop3_b16"
    dst = b.vdst(ins.operands[0])
    s0, s1, s2 = (b.src(op, float_mods=False) for op in ins.operands[1:])

    def run(g):
        a, c, d = s0(g), s1(g), s2(g)
        out = torch.zeros(torch.broadcast_shapes(a.shape, c.shape, d.shape), dtype=torch.int32, device=a.device)
        for k in range(8):  # minterm k contributes where (S0, S1, S2) bits equal k's bits
            if (table >> k) & 1:
                out = out | ((a if k & 4 else ~a) & (c if k & 2 else ~c) & (d if k & 1 else ~d))
        g.wv(dst, out & 0xFFFF if half else out)
    return Handler(ins, index, run, "valu", b)


def _ieee_max(a, c):
    """IEEE 754-2019 maximum: NaN if either is NaN, and -0 < +0."""
    r = torch.where((a > c) | ((a == c) & (as_bits(c) < 0)), a, c)
    return torch.where(a.isnan() | c.isnan(), torch.full_like(r, float("nan")), r)


def _ieee_min(a, c):
    r = torch.where((a < c) | ((a == c) & (as_bits(a) < 0)), a, c)
    return torch.where(a.isnan() | c.isnan(), torch.full_like(r, float("nan")), r)


def _minmax3(ins, b, index):
    _expect(ins, 4)
    _no_mods(ins)
    fn = _ieee_max if ins.base == "v_maximum3_f32" else _ieee_min
    fin, post = _f32_in(b.ctx), _f32_post(b.ctx)
    dst = b.vdst(ins.operands[0])
    s = [b.src(op) for op in ins.operands[1:]]

    def run(g):
        x, y, z = (fin(r(g)) for r in s)
        g.wv(dst, as_bits(post(fn(fn(x, y), z))))
    return Handler(ins, index, run, "valu", b)


def _cvt_pk_f16_f32(ins, b, index):
    """v_cvt_pk_f16_f32 (gfx950): {f16(S1), f16(S0)}, round to nearest even."""
    _expect(ins, 3)
    _no_mods(ins)
    fin = _f32_in(b.ctx)
    dst = b.vdst(ins.operands[0])
    s0, s1 = b.src(ins.operands[1]), b.src(ins.operands[2])

    def run(g):
        g.wv(dst, f32_to_f16_bits(fin(s0(g))) | (f32_to_f16_bits(fin(s1(g))) << 16))
    return Handler(ins, index, run, "valu", b)


def _permlane_swap(ins, b, index):
    """v_permlane16_swap_b32 / v_permlane32_swap_b32 vdst, vsrc (gfx950): the odd rows (of 16 or 32 lanes)
    of vdst trade places with the even rows of vsrc; both registers are written. fi / bound_ctrl (DPP's
    fetch-inactive and out-of-bounds-reads-0 bits) only change what an inactive partner lane gives: with
    either set, a wave whose EXEC is not full is refused (HipKittens' attention sets bound_ctrl, all lanes on)."""
    _expect(ins, 2)
    _no_mods(ins, ("fi", "bound_ctrl"))
    inactive_matters = bool(ins.mods.get("fi") or ins.mods.get("bound_ctrl"))
    row = 16 if "permlane16" in ins.base else 32
    x = b.vdst(ins.operands[0])
    b.vsrc_index(ins.operands[0])
    y = b.vdst(ins.operands[1], what="vsrc")
    b.vsrc_index(ins.operands[1])
    lane = torch.arange(64)
    odd = ((lane // row) % 2) == 1
    partner = torch.where(odd, lane - row, lane + row)  # odd row of vdst <-> the even row before it in vsrc

    def run(g):
        if inactive_matters and g.exec_mask() is not None:
            raise Fault(f"{ins.base} with fi / bound_ctrl and lanes off in EXEC: what an inactive partner "
                        f"lane gives is not modelled")
        vx, vy = g.rv(x), g.rv(y)
        p = partner.to(vx.device)
        o = odd.to(vx.device)
        new_x = torch.where(o, vy.index_select(1, p), vx)
        new_y = torch.where(o, vy, vx.index_select(1, p))
        g.wv(x, new_x)
        g.wv(y, new_y)
    return Handler(ins, index, run, "valu", b)


def build_vext(ins, b, index):
    """Handler for one of this module's instructions, or None."""
    base = ins.base
    if base in SCAN_OPS:
        return _scan(ins, b, index)
    if base == "v_lshl_add_u64":
        return _lshl_add_u64(ins, b, index)
    if base in ("v_mad_u64_u32", "v_mad_i64_i32"):
        return _mad64(ins, b, index)
    if base.startswith(("v_cmp_", "v_cmpx_")) and base.endswith(("_u64", "_i64")):
        return _cmp64(ins, b, index)
    if base.startswith(("v_cmp_class_", "v_cmpx_class_")):
        return _cmp_class(ins, b, index)
    if base in ("v_div_scale_f32", "v_div_fmas_f32", "v_div_fixup_f32"):
        return _fdiv(ins, b, index)
    if base in F16_OPS or base in U16_OPS:
        return _op16(ins, b, index)
    if base in ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16"):
        return _fma_mix(ins, b, index)
    if base in PK_CVT:
        return _cvt_pk(ins, b, index)
    if base == "v_cvt_pk_u8_f32":
        return _cvt_pk_u8(ins, b, index)
    if base in PK_INT:
        return _pk_int(ins, b, index)
    if base in ("v_bitop3_b32", "v_bitop3_b16"):
        return _bitop3(ins, b, index)
    if base in ("v_maximum3_f32", "v_minimum3_f32"):
        return _minmax3(ins, b, index)
    if base == "v_cvt_pk_f16_f32":
        return _cvt_pk_f16_f32(ins, b, index)
    if base in ("v_permlane16_swap_b32", "v_permlane32_swap_b32"):
        return _permlane_swap(ins, b, index)
    return None
