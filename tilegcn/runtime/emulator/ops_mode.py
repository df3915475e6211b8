"""The MODE hardware register (s_setreg_b32 / s_setreg_imm32_b32 / s_getreg_b32) and the gfx950 scaled fp8
conversions, which read its FP16_OVFL bit (issue 22).

MODE starts as the kernel descriptor sets it (rounding, denormals, DX10_CLAMP, IEEE: AMDGPUUsage, "Initial
Kernel Execution State") and lives in a scalar slot of each wave (decode.MODE_SLOT). The emulator's arithmetic
follows the descriptor's rounding and denormal modes, so a write that changes any field but FP16_OVFL is a
Fault, not a silent change of meaning. FP16_OVFL (MODE bit 23; its start value is the descriptor's
.amdhsa_fp16_overflow) makes fp8/bf8 conversions saturate to the largest finite value: Triton 3.9 sets it in every
kernel with a cast to fp8 (tests/corpus/fp8_cast.*.amdgcn), on gfx942 and gfx950, because "when the bit is 0/1, the
conversion from fp32/fp16/bf16 to fp8/bf8 is in non-saturation/saturation mode" (Triton's AMD backend,
ElementwiseOpToLLVM.cpp, adjustModeRegister).

v_cvt_scalef32_pk_{fp8,bf8}_f32 D, S0, S1, SCALE: the two f32 sources divided by SCALE, rounded to nearest even
to the arch's fp8 / bf8 (arch.fp8_dtypes, through torch's own conversion), into the 16-bit half of D that
op_sel[3] picks (the other half kept). v_cvt_scalef32_pk_{f32,f16,bf16}_{fp8,bf8,fp4} D, S0, SCALE: two elements of
S0 (op_sel picks which: `_from_low`) times SCALE (Triton's bf16 x MX `tl.dot_scaled` on gfx950 upcasts with the
bf16 forms, tests/corpus). Only power-of-two scales are modelled (what MX scales are): another scale, and an input
past the fp8 range without FP16_OVFL, are Faults (`fp8_codes`). The conversions to fp4 are not modelled.
"""
from __future__ import annotations

import torch

from . import fp8_encoding, mfma_lowp
from .decode import HWREG_IDS, MODE_SLOT, HwReg
from .program import BindError, Handler
from .state import Fault

FP16_OVFL_BIT = 23
_MODE_BITS = 32


def initial_mode(kd) -> int:
    """MODE at wave start from the kernel descriptor (FP_ROUND [3:0], FP_DENORM [7:4], DX10_CLAMP [8], IEEE [9],
    FP16_OVFL [23] from COMPUTE_PGM_RSRC1 bit 26)."""
    return (kd.float_round_mode_32 | kd.float_round_mode_16_64 << 2 | kd.float_denorm_mode_32 << 4
            | kd.float_denorm_mode_16_64 << 6 | int(kd.dx10_clamp) << 8 | int(kd.ieee_mode) << 9
            | int(kd.fp16_overflow) << FP16_OVFL_BIT)


def _field(op, what):
    if not isinstance(op, HwReg):
        raise BindError(f"{what}: expected hwreg(...), got {getattr(op, 'text', op)!r}")
    if op.name not in HWREG_IDS:
        raise BindError(f"hardware register {op.name} is not modelled (only HW_REG_MODE)")
    if op.offset + op.size > _MODE_BITS or op.size < 1:
        raise BindError(f"hwreg field [{op.offset}, {op.offset + op.size}) is outside the 32-bit register")
    return op.offset, ((1 << op.size) - 1) << op.offset


def _setreg(ins, b, index):
    ops = ins.operands
    if len(ops) != 2:
        raise BindError("expected hwreg(...), value")
    offset, mask = _field(ops[0], "destination")
    value = b.src(ops[1], float_mods=False, what="value")

    def run(g):
        old = g.rs(MODE_SLOT)
        new = (old & ~mask) | ((value(g).view(-1).to(torch.int64) << offset) & mask)
        changed = (old ^ new) & ~(1 << FP16_OVFL_BIT)
        if bool((changed != 0).any()):
            raise Fault(f"{ins.base} changes MODE bits 0x{int(changed.max()):x}: only FP16_OVFL (bit "
                        f"{FP16_OVFL_BIT}) is modelled; rounding and denormal modes stay the descriptor's")
        g.ws(MODE_SLOT, new)
    return Handler(ins, index, run, "salu", b)


def _getreg(ins, b, index):
    ops = ins.operands
    if len(ops) != 2:
        raise BindError("expected sdst, hwreg(...)")
    offset, mask = _field(ops[1], "source")
    dst = b.sdst(ops[0], 1)

    def run(g):
        g.ws(dst, (g.rs(MODE_SLOT) & mask) >> offset)
    return Handler(ins, index, run, "salu", b)


# ---- scaled conversions (gfx950) --------------------------------------------------------------------------------
_TO_8BIT = {"v_cvt_scalef32_pk_fp8_f32": "fp8", "v_cvt_scalef32_pk_bf8_f32": "bf8"}
_FROM_LOW = {f"v_cvt_scalef32_pk_{out}_{fmt}": (fmt, out) for fmt in ("fp8", "bf8", "fp4")
             for out in ("f32", "f16", "bf16")}


def _power_of_two_scale(g, read) -> torch.Tensor:
    s = read(g).view(torch.float32).expand(g.n, 64)
    mant = s.view(torch.int32) & 0x7FFFFF
    ok = (mant == 0) & torch.isfinite(s) & (s > 0)
    ex = g.exec_mask()
    bad = ~ok if ex is None else (~ok & ex)
    if bool(bad.any()):
        raise Fault("scaled conversion with a scale that is not a positive power of two is not modelled")
    return s


def _fp8_dtype(b, fmt):
    return getattr(torch, b.ctx.arch.fp8_dtypes[("fp8", "bf8").index(fmt)])


def fp16_ovfl(g) -> torch.Tensor:
    """bool [n, 1]: each wave's MODE.FP16_OVFL (the fp8 conversions' clamp bit)."""
    return ((g.rs(MODE_SLOT) >> FP16_OVFL_BIT) & 1).bool().view(-1, 1)


def fp8_codes(v: torch.Tensor, dtype, saturate: torch.Tensor, active, what: str) -> torch.Tensor:
    """int32 codes of float values `v` [n, 64] rounded to nearest even to the fp8 `dtype` (fp8_encoding.encode, the
    non-scaled conversions' encoder too). A value that rounds past the largest finite one, infinities included,
    becomes it (+-) where `saturate` (MODE.FP16_OVFL) is set; without it the scaled forms' result is not modelled (the
    CDNA4 guide does not say it is the non-scaled forms' NaN / inf): a Fault in the `active` lanes (None: all). A NaN
    becomes the NaN code torch's conversion gives (the guides do not say which NaN; Triton converts pairs whose other
    half it drops, NaN or not)."""
    bad = fp8_encoding.overflows(v, dtype) & ~saturate
    if active is not None:
        bad = bad & active
    if bool(bad.any()):
        raise Fault(f"{what}: an input past the fp8 range with MODE.FP16_OVFL clear is not modelled")
    return fp8_encoding.encode(v, dtype, saturate).to(torch.int32)


def _to_8bit(ins, b, index, fmt):
    _mods(ins, ("op_sel",))
    if len(ins.operands) != 4:
        raise BindError("expected vdst, src0, src1, scale")
    sel = ins.mods.get("op_sel", (0, 0, 0, 0))
    dst_hi = bool(sel[3]) if len(sel) == 4 else False
    if any(sel[:3]):
        raise BindError("op_sel on the sources of a scaled conversion is not modelled")
    dst = b.vdst(ins.operands[0])
    b.vsrc_index(ins.operands[0], 1, "vdst (its other half is kept)")
    s0, s1, scale = (b.src(op, float_mods=False) for op in ins.operands[1:])
    dtype = _fp8_dtype(b, fmt)

    def convert(g, x, sc):
        return fp8_codes(x.view(torch.float32).expand(g.n, 64) / sc, dtype, fp16_ovfl(g), g.exec_mask(), ins.base)

    def run(g):
        sc = _power_of_two_scale(g, scale)
        packed = convert(g, s0(g), sc) | (convert(g, s1(g), sc) << 8)
        old = g.rv(dst)
        g.wv(dst, (old & 0xFFFF) | (packed << 16) if dst_hi else (old & ~0xFFFF) | packed)
    return Handler(ins, index, run, "valu", b)


def _element_values(b, fmt) -> torch.Tensor:
    """float64 value of every code of `fmt` on this arch: fp8 / bf8 through torch's float8 dtypes, fp4 from the OCP
    table (mfma_lowp, the same decoding the f8f6f4 MFMAs use)."""
    if fmt == "fp4":
        return mfma_lowp.decode_table("fp4", b.ctx.arch.name)
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(_fp8_dtype(b, fmt)).double()


def _from_low(ins, b, index, fmt, out):
    """v_cvt_scalef32_pk_{f32,f16,bf16}_{fp8,bf8,fp4} D, S0, SCALE: two elements of S0 (fp8/bf8: the 16-bit half
    op_sel[0] picks; fp4: the byte op_sel[0] | op_sel[1] << 1 picks, as llc 22 prints the intrinsics' selector), low
    one first, times SCALE, rounded once to `out` (exact for MX scales); f32 results fill D[0:1], 16-bit ones the
    two halves of D."""
    _mods(ins, ("op_sel",))
    if len(ins.operands) != 3:
        raise BindError("expected vdst, src, scale")
    sel = tuple(ins.mods.get("op_sel", (0, 0, 0))) + (0, 0, 0)
    if fmt == "fp4":
        shift, width = 8 * (sel[0] | sel[1] << 1), 4
    else:
        shift, width = 16 * sel[0], 8
        if sel[1]:
            raise BindError("op_sel[1] of an fp8 / bf8 scaled conversion is not modelled")
    if any(sel[2:4]):
        raise BindError("op_sel of the destination of a scaled conversion is not modelled")
    wide = out == "f32"
    dst = b.vdst(ins.operands[0], 2 if wide else 1)
    src, scale = (b.src(op, float_mods=False) for op in ins.operands[1:])
    table = _element_values(b, fmt)
    to_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[out]
    mask = (1 << width) - 1

    def run(g):
        sc = _power_of_two_scale(g, scale).double()
        bits = (src(g).expand(g.n, 64).to(torch.int64) >> shift) & ((1 << 2 * width) - 1)
        values = [(table.to(sc.device)[(bits >> (width * k)) & mask] * sc).to(to_dtype) for k in (0, 1)]
        if wide:
            g.wvs(dst, torch.stack([v.view(torch.int32) for v in values]))
        else:
            lo, hi = (v.view(torch.int16).to(torch.int32) & 0xFFFF for v in values)
            g.wv(dst, lo | (hi << 16))
    return Handler(ins, index, run, "valu", b)


def _mods(ins, allowed):
    bad = [k for k in ins.mods if k not in allowed]
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {ins.base}")


def build_mode(ins, b, index):
    """Handler for s_setreg / s_getreg of MODE and the scaled fp8 conversions, or None."""
    base = ins.base
    if base in ("s_setreg_b32", "s_setreg_imm32_b32"):
        return _setreg(ins, b, index)
    if base == "s_getreg_b32":
        return _getreg(ins, b, index)
    if base in _TO_8BIT:
        return _to_8bit(ins, b, index, _TO_8BIT[base])
    if base in _FROM_LOW:
        return _from_low(ins, b, index, *_FROM_LOW[base])
    return None
