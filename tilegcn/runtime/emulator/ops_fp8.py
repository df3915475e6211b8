"""The non-scaled fp8 / bf8 conversions: v_cvt_pk_fp8_f32, v_cvt_pk_bf8_f32 (two f32 -> two bytes of one word),
v_cvt_f32_fp8, v_cvt_f32_bf8 (one byte -> f32) and v_cvt_pk_f32_fp8, v_cvt_pk_f32_bf8 (two bytes -> two f32).

The byte formats are the arch's (arch.Arch.fp8_dtypes): gfx942 reads "fp8" as E4M3 FNUZ (bias 8) and "bf8" as E5M2
FNUZ (bias 16), neither with inf or -0, 0x80 their one NaN (CDNA3 ISA guide); gfx950 reads them as OCP E4M3 (bias
7, no inf, S.1111.111 NaN) and E5M2 (bias 15, IEEE inf and NaN) (CDNA4 ISA guide, OCP 8-bit floating point spec).
f32 -> fp8 rounds to nearest even (fp8_encoding.encode, the encoder the scaled conversions share); these encodings
have no clamp modifier (llvm-mc refuses one): with MODE.FP16_OVFL set (s_setreg, ops_mode.py) a value past the
largest finite one, inf included, saturates to it; else it becomes what the format has for overflow: NaN for the
FNUZ formats and OCP E4M3, inf for OCP E5M2 (the OCP spec's non-saturating conversion); NaN in gives NaN. f32 denormal inputs are far below the smallest
fp8 denormal and round to zero either way. tests/test_dtypes.py checks every code and a sweep of f32 values
against torch's float8 dtypes on both arches.

Byte selection: v_cvt_pk_*_f32 writes bytes [1:0] of its destination, or [3:2] with op_sel[2] (the destination's
op_sel bit), and keeps the other half; the f32 conversions read byte 0 (word 0 for the packed one) of their source,
another with SDWA's src0_sel (BYTE_n / WORD_1), which the SDWA wrapper applies before this module's code runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fp8_encoding
from .ops_mode import fp16_ovfl
from .program import BindError, Handler, as_bits, as_f32

M32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Fp8Format:
    exponent_bits: int
    mantissa_bits: int
    bias: int
    fnuz: bool  # no inf, no -0, 0x80 the one NaN
    has_inf: bool  # OCP E5M2: exponent all ones is inf (mantissa 0) or NaN


FORMATS = {
    ("gfx942", "fp8"): Fp8Format(4, 3, 8, fnuz=True, has_inf=False),
    ("gfx942", "bf8"): Fp8Format(5, 2, 16, fnuz=True, has_inf=False),
    ("gfx950", "fp8"): Fp8Format(4, 3, 7, fnuz=False, has_inf=False),
    ("gfx950", "bf8"): Fp8Format(5, 2, 15, fnuz=False, has_inf=True),
}


def _format(ctx, kind: str) -> Fp8Format:
    fmt = FORMATS.get((ctx.arch.name, kind))
    if fmt is None:
        raise BindError(f"the {kind} conversions are not modelled on {ctx.arch.name}")
    return fmt


def decode(code: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """Byte codes (int tensor, low 8 bits used) -> float32 values (exact)."""
    c = code.long() & 0xFF
    sign = torch.where((c >> 7) == 1, -1.0, 1.0).double()
    exponent_field = (c >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa_field = (c & ((1 << fmt.mantissa_bits) - 1)).double()
    scale = float(1 << fmt.mantissa_bits)
    normal = torch.pow(2.0, (exponent_field - fmt.bias).double()) * (1 + mantissa_field / scale)
    subnormal = 2.0 ** (1 - fmt.bias) * mantissa_field / scale
    value = sign * torch.where(exponent_field == 0, subnormal, normal)
    top = exponent_field == (1 << fmt.exponent_bits) - 1
    if fmt.fnuz:
        value = torch.where(c == 0x80, torch.full_like(value, float("nan")), value)
    elif fmt.has_inf:
        value = torch.where(top & (mantissa_field == 0), sign * float("inf"), value)
        value = torch.where(top & (mantissa_field != 0), torch.full_like(value, float("nan")), value)
    else:
        value = torch.where(top & (mantissa_field == scale - 1), torch.full_like(value, float("nan")), value)
    return value.float()


def _no_mods(ins, allowed=()):
    extra = set(ins.mods) - set(allowed)
    if extra:
        raise BindError(f"modifiers {sorted(extra)} are not modelled on {ins.base}")


def _to_fp8(ins, b, index):
    """v_cvt_pk_{fp8,bf8}_f32 D, S0, S1: bytes {fp8(S1), fp8(S0)} into word op_sel[2] of D, the other word kept."""
    _no_mods(ins, ("op_sel",))
    kind = "fp8" if "fp8" in ins.base else "bf8"
    _format(b.ctx, kind)  # modelled on this arch
    dtype = getattr(torch, b.ctx.arch.fp8_dtypes[("fp8", "bf8").index(kind)])
    ops = ins.operands
    if len(ops) != 3:
        raise BindError("expected 3 operands")
    sel = ins.mods.get("op_sel", (0, 0, 0))
    high = bool(sel[-1])
    if any(sel[:-1]):
        raise BindError("op_sel on a source of v_cvt_pk_*8_f32 is not modelled")
    old = b.src(ops[0], float_mods=False)  # the half it keeps is read
    dst = b.vdst(ops[0])
    s0, s1 = b.src(ops[1]), b.src(ops[2])

    def run(g):
        saturate = fp16_ovfl(g)
        pair = fp8_encoding.encode(as_f32(s0(g)), dtype, saturate) | \
            (fp8_encoding.encode(as_f32(s1(g)), dtype, saturate) << 8)
        keep = old(g).long() & M32
        word = (keep & 0x0000FFFF) | (pair << 16) if high else (keep & 0xFFFF0000) | pair
        g.wv(dst, _i32(word))
    return Handler(ins, index, run, "valu", b)


def _i32(x):
    """int64 holding a 32-bit pattern -> int32 bits."""
    return torch.where(x >= 2**31, x - 2**32, x).to(torch.int32)


def _from_fp8(ins, b, index):
    """v_cvt_f32_{fp8,bf8} D, S0: f32(byte 0 of S0); v_cvt_pk_f32_{fp8,bf8} D[0:1], S0: bytes 0 and 1."""
    _no_mods(ins)
    fmt = _format(b.ctx, "fp8" if "fp8" in ins.base else "bf8")
    ops = ins.operands
    packed = ins.base.startswith("v_cvt_pk_")
    src = b.src(ops[1], float_mods=False)
    dst = b.vdst(ops[0], 2 if packed else 1)

    if packed:
        def run(g):
            v = src(g).long()
            lo, hi = as_bits(decode(v, fmt)), as_bits(decode(v >> 8, fmt))
            g.wvs(dst, torch.stack((lo.expand(g.n, 64), hi.expand(g.n, 64))))
    else:
        def run(g):
            g.wv(dst, as_bits(decode(src(g).long(), fmt)))
    return Handler(ins, index, run, "valu", b)


TO_FP8 = ("v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32")
FROM_FP8 = ("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8")


def build_fp8(ins, b, index):
    """Handler for one of this module's instructions, or None."""
    if ins.base in TO_FP8:
        return _to_fp8(ins, b, index)
    if ins.base in FROM_FP8:
        return _from_fp8(ins, b, index)
    return None
