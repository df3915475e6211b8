"""f64 VALU instructions and the frexp family, as LLVM emits them for Triton's and HIP's double arithmetic and
for llvm.frexp (issue 22): v_add/mul/fma/fmac/max/min/ldexp_f64, v_rcp/rsq_f64, the f64 division steps
(v_div_scale/fmas/fixup_f64), v_cmp_*_f64 and v_cmp_class_f64, v_cvt_f64_f32 / v_cvt_f32_f64 /
v_cvt_f64_i32 / v_cvt_i32_f64, v_frexp_mant / v_frexp_exp_i32 of f32 and f64.

Semantics follow the CDNA3 ISA guide's pseudo-code; choices where it leaves room:
  * f64 arithmetic is IEEE with round-to-nearest-even and denormals kept (FLOAT_DENORM_MODE_16_64 = 3, LLVM's
    default; another mode is refused at bind time). v_fma_f64 rounds once: the exact product (Dekker's
    TwoProduct) and sum are rounded with round-to-odd, then to nearest (Boldo and Melquiond, "Emulation of FMA
    and correctly rounded sums", IEEE TC 2008), exact away from overflow and the denormal range.
  * v_rcp_f64 / v_rsq_f64 return the f64 reciprocal (one IEEE division) / 1 / sqrt (two roundings): the
    hardware's approximations are within about 1 ulp, which LLVM's division and sqrt sequences refine; tests
    check those sequences' results against torch, not the approximations.
  * v_div_scale/fmas/fixup_f64 mirror the f32 forms (ops_vext.py) with the f64 constants: 2^+-128 scaling,
    exponent thresholds 53 and 768, 1023 for the fmas scale.
  * v_frexp_mant returns the mantissa in [0.5, 1) with the input's sign, the input itself for inf and NaN;
    v_frexp_exp_i32 returns 0 for 0, inf and NaN (torch.frexp's exponent otherwise).
"""
from __future__ import annotations

import torch

from .decode import EXEC_LO, VCC_LO, Const, Reg
from .program import BindError, Handler, u32

DBL_MIN = 2.2250738585072014e-308  # smallest normal f64
_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's splitter for 53-bit significands


def _no_mods(ins, allowed=()):
    bad = [k for k in ins.mods if k not in allowed]
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {ins.base}")


def _expect(ins, n):
    if len(ins.operands) != n:
        raise BindError(f"expected {n} operands, got {len(ins.operands)}")


def _check_denorm_mode(b):
    if b.ctx.kd.float_denorm_mode_16_64 != 3:
        raise BindError("f64 ops under a descriptor that flushes f64 denormals are not modelled")


def _src64(b, op):
    """Reader of a 64-bit float source as float64, with neg/abs applied."""
    if isinstance(op, Const):
        # a 32-bit literal is the high half of a 64-bit float operand (LLVM's AMDGPU operand rules)
        bits = (op.bits & 0xFFFFFFFF) << 32 if op.kind == "literal" else op.bits64()
        bits -= (1 << 64) if bits >= 1 << 63 else 0
        value = torch.tensor(bits, dtype=torch.int64).view(torch.float64)
        read = lambda g: value.to(g.m.device).view(1, 1)  # noqa: E731
    else:
        lo, hi = b.src_pair(op if not isinstance(op, Reg) else Reg(op.kind, op.index, op.count, False, False,
                                                                   op.text))
        read = lambda g: (u32(lo(g)) | (hi(g).to(torch.int64) << 32)).view(torch.float64)  # noqa: E731
    ab, neg = (op.abs, op.neg) if isinstance(op, (Reg, Const)) else (False, False)
    if ab:
        inner = read
        read = lambda g: inner(g).abs()  # noqa: E731
    if neg:
        inner2 = read
        read = lambda g: -inner2(g)  # noqa: E731
    return read


def _src32f(b, op):
    raw = b.src(op)
    return lambda g: raw(g).view(torch.float32)


def _write_f64(g, dst, x):
    bits = x.double().expand(g.n, 64).contiguous().view(torch.int64)
    lo = (bits & 0xFFFFFFFF).to(torch.int32)
    hi = (bits >> 32).to(torch.int32)
    g.wvs(dst, torch.stack((lo, hi)))


def _exec_and(g, mask):
    ex = g.exec_mask()
    mask = mask.expand(g.n, 64)
    return mask if ex is None else mask & ex


# ---- exact f64 fma ---------------------------------------------------------------------------------------------
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    t = a * _SPLIT
    hi = t - (t - a)
    return hi, a - hi


def _two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _round_to_odd(s, err):
    even = (s.view(torch.int64) & 1) == 0
    toward = torch.nextafter(s, torch.where(err > 0, torch.full_like(s, float("inf")),
                                            torch.full_like(s, -float("inf"))))
    return torch.where((err != 0) & torch.isfinite(s) & even, toward, s)


def fma_f64(a, b, c):
    """RNE(a * b + c) in f64 (module docstring); specials as a * b + c computes them."""
    uh, ul = _two_prod(a, b)
    th, tl = _two_sum(c, uh)
    v, e = _two_sum(tl, ul)
    exact = th + _round_to_odd(v, e)
    plain = a * b + c
    return torch.where(torch.isfinite(exact) & torch.isfinite(uh), exact, plain)


# ---- division steps --------------------------------------------------------------------------------------------
def _exp_field64(x):
    return (x.view(torch.int64) >> 52) & 0x7FF


def div_scale_f64(s0, s1, s2):
    """(D, VCC) of V_DIV_SCALE_F64: div_scale_f32's cases with 2^+-128 and the f64 thresholds."""
    e1, e2 = _exp_field64(s1), _exp_field64(s2)
    rcp_denorm = (1.0 / s1).abs() < DBL_MIN
    q = (s2 / s1).abs()
    q_denorm = (q < DBL_MIN) & (q > 0)
    up, down = s0 * 2.0 ** 128, s0 * 2.0 ** -128
    d, vcc = s0, torch.zeros_like(s0, dtype=torch.bool)
    d = torch.where(e2 <= 53, up, d)
    case = q_denorm
    d, vcc = torch.where(case & (s0 == s2), up, torch.where(case, s0, d)), vcc | case
    case = rcp_denorm
    d, vcc = torch.where(case, down, d), vcc & ~case
    case = rcp_denorm & q_denorm
    d, vcc = torch.where(case & (s0 == s1), down, torch.where(case, s0, d)), vcc | case
    case = (e1 == 0) & (s1 != 0)
    d, vcc = torch.where(case, up, d), vcc & ~case
    case = (e2 - e1) >= 768
    d, vcc = torch.where(case & (s0 == s1), up, torch.where(case, s0, d)), vcc | case
    case = (s2 == 0) | (s1 == 0)
    d, vcc = torch.where(case, torch.full_like(s0, float("nan")), d), vcc & ~case
    return d, vcc


def div_fmas_f64(s0, s1, s2, vcc):
    r = fma_f64(s0, s1, s2)
    up = _exp_field64(s2) > 1023
    return torch.where(vcc, torch.where(up, r * 2.0 ** 128, r * 2.0 ** -128), r)


def div_fixup(s0, s1, s2, underflow_exp_gap, exp_field):
    """V_DIV_FIXUP_F32/F64/F16: S0 the quotient, S1 the denominator, S2 the numerator; IEEE special cases."""
    neg = torch.signbit(s1) ^ torch.signbit(s2)
    inf = torch.where(neg, -float("inf"), float("inf")).to(s0.dtype)
    zero = torch.where(neg, -0.0, 0.0).to(s0.dtype)
    out = torch.where(neg, -s0.abs(), s0.abs())
    if underflow_exp_gap is not None:
        out = torch.where((exp_field(s2) - exp_field(s1)) < underflow_exp_gap, zero, out)
    out = torch.where(s1.isinf() | (s2 == 0), zero, out)
    out = torch.where((s1 == 0) | s2.isinf(), inf, out)
    nan = torch.full_like(s0, float("nan"))
    out = torch.where(s1.isinf() & s2.isinf(), nan, out)
    out = torch.where((s1 == 0) & (s2 == 0), nan, out)
    out = torch.where(s1.isnan(), s1, out)
    return torch.where(s2.isnan(), s2, out)


# ---- class test and frexp --------------------------------------------------------------------------------------
def class_mask_f64(x):
    """The V_CMP_CLASS bit (0..9) of each f64 value: sNaN, qNaN, -inf, -normal, -denormal, -0, +0, +denormal,
    +normal, +inf."""
    bits = x.view(torch.int64)
    e = (bits >> 52) & 0x7FF
    mant = bits & ((1 << 52) - 1)
    neg = bits < 0
    cls = torch.where(neg, 3, 8)
    cls = torch.where((e == 0) & (mant != 0), torch.where(neg, 4, 7), cls)
    cls = torch.where((e == 0) & (mant == 0), torch.where(neg, 5, 6), cls)
    cls = torch.where((e == 0x7FF) & (mant == 0), torch.where(neg, 2, 9), cls)
    return torch.where((e == 0x7FF) & (mant != 0), torch.where((mant >> 51) == 1, 1, 0), cls)


def frexp_mant(x):
    m, _ = torch.frexp(x)
    return torch.where(torch.isfinite(x), m, x)


def frexp_exp(x):
    _, e = torch.frexp(x)
    return torch.where(torch.isfinite(x), e, torch.zeros_like(e)).to(torch.int32)


# ---- binders ----------------------------------------------------------------------------------------------------
F64_OPS = {  # (sources, fn on float64)
    "v_add_f64": (2, lambda a, b: a + b),
    "v_mul_f64": (2, lambda a, b: a * b),
    "v_max_f64": (2, torch.fmax),
    "v_min_f64": (2, torch.fmin),
    "v_fma_f64": (3, fma_f64),
    "v_rcp_f64": (1, torch.reciprocal),
    "v_rsq_f64": (1, lambda a: 1.0 / torch.sqrt(a)),
    "v_sqrt_f64": (1, torch.sqrt),
    "v_frexp_mant_f64": (1, frexp_mant),
    "v_fract_f64": (1, lambda a: a - torch.floor(a)),
    "v_floor_f64": (1, torch.floor),
    "v_trunc_f64": (1, torch.trunc),
    "v_rndne_f64": (1, torch.round),
    "v_ceil_f64": (1, torch.ceil),
}
CMP_F64 = {
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "lg": lambda a, b: (a < b) | (a > b), "ge": lambda a, b: a >= b,
    "o": lambda a, b: ~(a.isnan() | b.isnan()), "u": lambda a, b: a.isnan() | b.isnan(),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
}


def _f64_op(ins, b, index):
    mac = ins.base == "v_fmac_f64"  # D = S0 * S1 + D
    n, fn = F64_OPS["v_fma_f64" if mac else ins.base]
    _no_mods(ins)
    _expect(ins, n if mac else n + 1)
    dst = b.vdst(ins.operands[0], 2)
    srcs = [_src64(b, op) for op in ins.operands[1:] + ([ins.operands[0]] if mac else [])]

    def run(g):
        _write_f64(g, dst, fn(*(s(g) for s in srcs)))
    return Handler(ins, index, run, "valu", b)


def _ldexp_f64(ins, b, index):
    _no_mods(ins)
    _expect(ins, 3)
    dst = b.vdst(ins.operands[0], 2)
    x, e = _src64(b, ins.operands[1]), b.src(ins.operands[2], float_mods=False)

    def run(g):
        _write_f64(g, dst, torch.ldexp(x(g), e(g).to(torch.float64)))
    return Handler(ins, index, run, "valu", b)


def _convert(ins, b, index):
    base = ins.base
    _no_mods(ins)
    _expect(ins, 2)
    if base in ("v_cvt_f64_f32", "v_cvt_f64_i32", "v_cvt_f64_u32"):
        dst = b.vdst(ins.operands[0], 2)
        if base == "v_cvt_f64_f32":
            src = _src32f(b, ins.operands[1])
            conv = lambda g: src(g).double()  # noqa: E731  exact
        else:
            raw = b.src(ins.operands[1], float_mods=False)
            conv = (lambda g: raw(g).double()) if base == "v_cvt_f64_i32" else (lambda g: u32(raw(g)).double())

        def run(g):
            _write_f64(g, dst, conv(g))
        return Handler(ins, index, run, "valu", b)
    dst = b.vdst(ins.operands[0])
    x = _src64(b, ins.operands[1])
    if base == "v_cvt_f32_f64":
        def run(g):
            g.wv(dst, x(g).float().view(torch.int32))  # one RNE rounding (torch's)
    elif base == "v_frexp_exp_i32_f64":
        def run(g):
            g.wv(dst, frexp_exp(x(g)))
    else:  # v_cvt_i32_f64: truncate, saturate, NaN -> 0
        def run(g):
            v = x(g).nan_to_num(0.0).trunc().clamp(-2.0**31, 2.0**31 - 1)
            g.wv(dst, v.to(torch.int32))
    return Handler(ins, index, run, "valu", b)


def _division(ins, b, index):
    base = ins.base
    _no_mods(ins)
    if base == "v_div_scale_f64":
        _expect(ins, 5)
        dst, vdst = b.vdst(ins.operands[0], 2), b.sdst(ins.operands[1], 2)
        s = [_src64(b, op) for op in ins.operands[2:]]

        def run(g):
            d, vcc = div_scale_f64(*(r(g).expand(g.n, 64) for r in s))
            _write_f64(g, dst, d)
            g.wlanemask(vdst, _exec_and(g, vcc))
        return Handler(ins, index, run, "valu", b)
    _expect(ins, 4)
    dst = b.vdst(ins.operands[0], 2)
    s = [_src64(b, op) for op in ins.operands[1:]]
    if base == "v_div_fixup_f64":
        def run(g):
            _write_f64(g, dst, div_fixup(*(r(g).expand(g.n, 64) for r in s), -1075, _exp_field64))
        return Handler(ins, index, run, "valu", b)
    b.read_s(VCC_LO, 2)  # v_div_fmas_f64 reads VCC implicitly

    def run(g):
        _write_f64(g, dst, div_fmas_f64(*(r(g).expand(g.n, 64) for r in s), g.lanemask(VCC_LO)))
    return Handler(ins, index, run, "valu", b)


def _cmp64(ins, b, index):
    """v_cmp[x]_<op>_f64 and v_cmp[x]_class_f64: a lane mask into the SGPR pair (and EXEC for cmpx)."""
    _no_mods(ins)
    _expect(ins, 3)
    _, kind, op, _ = ins.base.split("_")
    dst = b.sdst(ins.operands[0], 2)
    x = _src64(b, ins.operands[1])
    if op == "class":
        mask = b.src(ins.operands[2], float_mods=False)
        test = lambda g: ((mask(g) >> class_mask_f64(x(g))) & 1) == 1  # noqa: E731
    elif op in CMP_F64:
        y, fn = _src64(b, ins.operands[2]), CMP_F64[op]
        test = lambda g: fn(x(g), y(g))  # noqa: E731
    else:
        raise BindError(f"comparison {op} not modelled for f64")
    cmpx = kind == "cmpx"
    if cmpx:
        b.write_s(EXEC_LO, 2)

    def run(g):
        res = _exec_and(g, test(g))
        g.wlanemask(dst, res)
        if cmpx:
            g.wlanemask(EXEC_LO, res)
    return Handler(ins, index, run, "valu", b)


def _frexp_f32(ins, b, index):
    _no_mods(ins)
    _expect(ins, 2)
    dst = b.vdst(ins.operands[0])
    x = _src32f(b, ins.operands[1])
    if ins.base == "v_frexp_mant_f32":
        def run(g):
            g.wv(dst, frexp_mant(x(g)).view(torch.int32))
    else:
        def run(g):
            g.wv(dst, frexp_exp(x(g)))
    return Handler(ins, index, run, "valu", b)


def build_f64(ins, b, index):
    """Handler for one of this module's instructions, or None."""
    base = ins.base
    if base in ("v_frexp_mant_f32", "v_frexp_exp_i32_f32"):
        return _frexp_f32(ins, b, index)
    if not (base.endswith("_f64") or base in ("v_cvt_f64_f32", "v_cvt_f64_i32", "v_cvt_f64_u32")):
        return None
    if base.startswith(("v_cmp_", "v_cmpx_")) and base.count("_") == 3:
        _check_denorm_mode(b)
        return _cmp64(ins, b, index)
    if base in F64_OPS or base == "v_fmac_f64":
        _check_denorm_mode(b)
        return _f64_op(ins, b, index)
    if base == "v_ldexp_f64":
        _check_denorm_mode(b)
        return _ldexp_f64(ins, b, index)
    if base in ("v_div_scale_f64", "v_div_fmas_f64", "v_div_fixup_f64"):
        _check_denorm_mode(b)
        return _division(ins, b, index)
    if base in ("v_cvt_f64_f32", "v_cvt_f32_f64", "v_cvt_f64_i32", "v_cvt_f64_u32", "v_cvt_i32_f64",
                "v_frexp_exp_i32_f64"):
        _check_denorm_mode(b)
        return _convert(ins, b, index)
    return None
