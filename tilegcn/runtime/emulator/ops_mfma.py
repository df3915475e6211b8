"""MFMA instructions: operand fetch (VGPR or AGPR ranges), legality per arch, EXEC, hazard metadata.

The arithmetic and the register layouts live in `mfma.py` (shape_of / execute) for tilegcn's bf16 / f16 MFMAs and in
`mfma_lowp.py` for the int8 / fp8 / fp32 / xf32 / f8f6f4 ones of other compilers' code (`_build_lowp` binds those:
the formats cbsz / blgp select on the f8f6f4 forms, the scale operands and the op_sel bytes of the scaled forms).
Here we only find the registers: srcA/srcB are consecutive VGPRs or AGPRs, srcC and vdst d_regs consecutive ones
(srcC may also be an inline constant). The broadcast controls cbsz/abid/blgp (other than the f8f6f4 formats) and
neg modifiers are refused. EXEC must have every lane on: the guides used here do not say what a partially masked
MFMA does, so a partial EXEC is an EmulatorError rather than a guess.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...amdgcn.arch import f8f6f4_passes
from ...errors import EmulatorError
from . import mfma_lowp
from .decode import Const, Reg
from .program import BindError, Handler
from .state import Fault

try:  # written by another engineer; the emulator runs without it (MFMAs then fail when executed)
    from . import mfma as _mfma
except ImportError:  # pragma: no cover
    _mfma = None


@dataclass(frozen=True)
class MfmaOperands:
    ab: frozenset  # srcA and srcB registers
    c: frozenset  # srcC registers (empty for a constant)
    c_range: tuple | None  # (first, count) of srcC
    srcs: frozenset  # all source registers
    passes: int


def build_mfma(ins, b, index):
    if not ins.base.startswith("v_mfma"):
        return None
    if _mfma is None:
        raise BindError("MFMA support (tilegcn/runtime/emulator/mfma.py) is not available")
    ctx = b.ctx
    lowp = mfma_lowp.lookup(ins.base, ctx.arch)
    if lowp is not None:
        return _build_lowp(ins, b, index, lowp)
    try:
        info = _mfma.shape_of(ins.base, arch=ctx.arch.name)
    except TypeError:
        info = _mfma.shape_of(ins.base)
    if info is None:
        raise BindError(f"{ins.base} is not an MFMA the emulator implements on {ctx.arch.name}")
    legal = {s.name(dt) for dt, shapes in ctx.arch.mfma_shapes.items() for s in shapes}
    if not any((info.M, info.N, info.K) == (s.M, s.N, s.K) and info.in_dtype == dt
               for dt, shapes in ctx.arch.mfma_shapes.items() for s in shapes):
        raise BindError(f"{ins.base} is not legal on {ctx.arch.name} (it has {', '.join(sorted(legal))})")
    for k, v in ins.mods.items():
        if k in ("cbsz", "abid", "blgp") and v == 0:
            continue
        raise BindError(f"MFMA modifier {k}:{v} is not modelled")
    ops = ins.operands
    if len(ops) != 4:
        raise BindError("expected vdst, srcA, srcB, srcC")
    dst = b.vdst(ops[0], info.d_regs, "vdst")
    a = b.vsrc_index(ops[1], info.a_regs, "srcA")
    bb = b.vsrc_index(ops[2], info.a_regs, "srcB")
    if isinstance(ops[3], Const):
        c_const = torch.tensor(ops[3].bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
        c = None
    else:
        c = b.vsrc_index(ops[3], info.d_regs, "srcC")
        c_const = None
    ab = frozenset(range(a, a + info.a_regs)) | frozenset(range(bb, bb + info.a_regs))
    cset = frozenset(range(c, c + info.d_regs)) if c is not None else frozenset()
    meta = MfmaOperands(ab, cset, (c, info.d_regs) if c is not None else None, ab | cset, info.passes)
    name = ins.base
    dst_set = frozenset(range(dst, dst + info.d_regs))
    dst_range = (dst, info.d_regs)
    nd, na = info.d_regs, info.a_regs

    def run(g):
        ex = g.exec_mask()
        if ex is not None and not bool(ex.all()):
            raise Fault("MFMA with EXEC not all ones is not modelled (the ISA guides used do not define it)")
        # [regs, waves, 64] register slabs -> [waves, 64, regs] views; execute() gathers from them
        A = g.rvs(a, na).permute(1, 2, 0)
        B = g.rvs(bb, na).permute(1, 2, 0)
        if c is not None:
            C = g.rvs(c, nd).permute(1, 2, 0).view(torch.float32)
        else:
            C = c_const.to(g.m.device).expand(g.n, 64, nd)
        D = _mfma.execute(name, A, B, C)
        g.wvs(dst, D.view(torch.int32).permute(2, 0, 1), mask=None)
        g.mfma_recs.append([g.t, dst_set, dst_range, info.passes, g.pc - 1, None])
    return Handler(ins, index, run, "mfma", b, mfma=meta)


def _scale_byte_selects(ins) -> tuple:
    """(A, B) byte of the scale registers a v_mfma_scale reads: op_sel[i] is bit 0, op_sel_hi[i] bit 1 (llc 22
    prints opsel 1 as op_sel:[1,..], 2 as op_sel_hi:[1,..], 3 as both)."""
    lo = ins.mods.get("op_sel", (0, 0, 0))
    hi = ins.mods.get("op_sel_hi", (0, 0, 0))
    return lo[0] | hi[0] << 1, lo[1] | hi[1] << 1


def _check_lowp_mods(ins, info):
    allowed = {"cbsz", "blgp"} if info.a_type == "f8f6f4" else set()
    if info.scaled:
        allowed |= {"op_sel", "op_sel_hi"}
    for k, v in ins.mods.items():
        if k in allowed or (k in ("cbsz", "abid", "blgp") and v == 0):
            continue
        raise BindError(f"MFMA modifier {k}:{v} is not modelled on {ins.base}")
    if info.scaled and ins.mods.get("op_sel", (0, 0, 0))[2] | ins.mods.get("op_sel_hi", (0, 0, 0))[2]:
        raise BindError(f"{ins.base}: op_sel of srcC is not modelled")


def _build_lowp(ins, b, index, info):
    """An int8 / fp8 / fp32 / xf32 / f8f6f4 MFMA (mfma_lowp.py), scaled or not."""
    _check_lowp_mods(ins, info)
    arch = b.ctx.arch
    try:
        a_fmt, b_fmt = mfma_lowp.formats(info, ins.mods.get("cbsz", 0), ins.mods.get("blgp", 0))
    except EmulatorError as exc:
        raise BindError(str(exc)) from None
    six_bit = [f for f in (a_fmt, b_fmt) if mfma_lowp.WIDTH[f] == 6]
    if six_bit:
        # their values are the OCP tables', but no code object has shown how 32 six-bit values fill 6 VGPRs
        raise BindError(f"{six_bit[0]} operands of {ins.base} are not modelled (their register packing is checked "
                        "against no compiler's code)")
    na, nb = mfma_lowp.operand_regs(info, "a", a_fmt), mfma_lowp.operand_regs(info, "b", b_fmt)
    nd = mfma_lowp.acc_regs(info)
    passes = f8f6f4_passes(info, ins.mods.get("cbsz", 0), ins.mods.get("blgp", 0)) if info.a_type == "f8f6f4" \
        else info.passes
    key = passes if info.xdl else ("smfma", passes)
    ops = ins.operands
    if len(ops) != (6 if info.scaled else 4):
        raise BindError("expected vdst, srcA, srcB, srcC" + (", scale A, scale B" if info.scaled else ""))
    dst = b.vdst(ops[0], nd, "vdst")
    a = b.vsrc_index(ops[1], na, "srcA")
    bb = b.vsrc_index(ops[2], nb, "srcB")
    if isinstance(ops[3], Const):
        c_bits = torch.tensor(ops[3].bits, dtype=torch.int64).to(torch.int32)
        c = None
    else:
        c = b.vsrc_index(ops[3], nd, "srcC")
        c_bits = None
    scale_readers, scale_regs = None, frozenset()
    if info.scaled:
        scale_readers = (b.src(ops[4], float_mods=False, what="scale A"),
                         b.src(ops[5], float_mods=False, what="scale B"))
        scale_regs = frozenset(b.vsrc_index(op, 1, "scale") for op in ops[4:6]
                               if isinstance(op, Reg) and op.kind in "va")
    sel_a, sel_b = _scale_byte_selects(ins) if info.scaled else (0, 0)
    ab = frozenset(range(a, a + na)) | frozenset(range(bb, bb + nb))
    cset = frozenset(range(c, c + nd)) if c is not None else frozenset()
    meta = MfmaOperands(ab, cset, (c, nd) if c is not None else None, ab | cset | scale_regs, key)
    dst_set, dst_range = frozenset(range(dst, dst + nd)), (dst, nd)
    arch_name = arch.name

    def scale(read, g, byte):
        bits = read(g).expand(g.n, 64)
        return mfma_lowp.decode_e8m0((bits >> (8 * byte)) & 0xFF)

    def run(g):
        ex = g.exec_mask()
        if ex is not None and not bool(ex.all()):
            raise Fault("MFMA with EXEC not all ones is not modelled (the ISA guides used do not define it)")
        A = g.rvs(a, na).permute(1, 2, 0)
        B = g.rvs(bb, nb).permute(1, 2, 0)
        C = g.rvs(c, nd).permute(1, 2, 0) if c is not None else c_bits.to(g.m.device).expand(g.n, 64, nd)
        sa = sb = None
        if scale_readers is not None:
            sa, sb = scale(scale_readers[0], g, sel_a), scale(scale_readers[1], g, sel_b)
        D = mfma_lowp.execute(info, arch_name, A, B, C, a_fmt, b_fmt, sa, sb)
        g.wvs(dst, D.permute(2, 0, 1), mask=None)
        g.mfma_recs.append([g.t, dst_set, dst_range, key, g.pc - 1, None])
    return Handler(ins, index, run, "mfma", b, mfma=meta)

