"""MFMA instructions: operand fetch (VGPR or AGPR ranges), legality per arch, EXEC, hazard metadata.

The arithmetic and the register layouts live in `mfma.py` (shape_of / execute). Here we only find the
registers: srcA/srcB are a_regs consecutive VGPRs or AGPRs, srcC and vdst d_regs consecutive ones
(srcC may also be an inline constant). The broadcast controls cbsz/abid/blgp and neg modifiers are
refused. EXEC must have every lane on: the guides used here do not say what a partially masked MFMA
does, so a partial EXEC is an EmulatorError rather than a guess.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .decode import Const
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
