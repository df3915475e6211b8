"""Hazard nops: `s_nop` where the arch needs wait states between dependent instructions.

Input: instructions with waits placed. Output: the same with `s_nop N` (N+1 wait states) inserted.
Rules come from the arch table (`arch.mfma_hazards`): an MFMA's result read by VALU, memory ops,
v_accvgpr_read or as another MFMA's srcA/srcB needs `vdst_to_read[passes]` wait states; as srcC of
exactly the same registers none (back-to-back accumulation), of partially overlapping ones
`vdst_to_srcc_overlap[passes]`; a VALU write (v_accvgpr_write included) read by an MFMA needs
`valu_write_to_mfma_src`; an LDS DMA (which reads M0) right after a SALU write of M0 needs
`m0_write_to_lds_dma_nops + 1`. Every issued instruction counts one wait state. The pass follows the
instruction list linearly (labels do not reset it).
"""
from __future__ import annotations

from . import isa
from .isa import M0, Inst

_FORGET_AFTER = 32  # no hazard needs more wait states than this


def _units(regs) -> set:
    out = set()
    for r in regs:
        out.update(r.units())
    return out


def _mfma_passes(op: str, arch) -> int:
    for shapes in arch.mfma_shapes.values():
        for shape in shapes:
            if op.startswith(shape.name_template.format(dtype="")):
                return shape.passes
    raise ValueError(f"unknown MFMA {op}")


def _required(inst: Inst, mfmas: list, valu_writes: list, m0_since: int, arch) -> int:
    """Wait states `inst` still needs."""
    hz = arch.mfma_hazards
    need = 0
    if inst.kind == isa.LDS_DMA:
        need = max(need, arch.m0_write_to_lds_dma_nops + 1 - m0_since)
    if inst.kind == isa.MFMA:
        src_ab = _units(inst.uses[:2])
        src_c_reg = inst.uses[2] if len(inst.uses) > 2 else None
        src_c = _units([src_c_reg]) if src_c_reg is not None else set()
        for dst_reg, dst, passes, since in mfmas:
            if dst & src_ab:
                need = max(need, hz.vdst_to_read[passes] - since)
            if dst & src_c and dst_reg != src_c_reg:
                need = max(need, hz.vdst_to_srcc_overlap[passes] - since)
        for dst, since in valu_writes:
            if dst & (src_ab | src_c):
                need = max(need, hz.valu_write_to_mfma_src - since)
    elif inst.kind not in (isa.LABEL, isa.COMMENT, isa.WAIT, isa.BARRIER, isa.BRANCH, isa.SOPP, isa.SALU,
                           isa.SMEM):
        reads = _units(inst.uses)
        for _, dst, passes, since in mfmas:
            if dst & reads:
                need = max(need, hz.vdst_to_read[passes] - since)
    return need


def insert_hazard_nops(insts: list, arch) -> list:
    out: list = []
    mfmas: list = []  # (dst Reg, dst units, passes, wait states since)
    valu_writes: list = []  # (units, wait states since)
    m0_since = _FORGET_AFTER  # wait states since the last write of M0

    def advance(states: int):
        nonlocal mfmas, valu_writes, m0_since
        m0_since = min(m0_since + states, _FORGET_AFTER)
        mfmas = [(r, d, p, s + states) for r, d, p, s in mfmas if s + states < _FORGET_AFTER]
        valu_writes = [(d, s + states) for d, s in valu_writes if s + states < _FORGET_AFTER]

    for inst in insts:
        need = _required(inst, mfmas, valu_writes, m0_since, arch)
        while need > 0:
            n = min(need, arch.max_nop + 1)
            out.append(Inst("s_nop", (n - 1,), kind=isa.SOPP))
            advance(n)
            need -= n
        out.append(inst)
        if inst.kind in (isa.LABEL, isa.COMMENT):
            continue
        advance(int(inst.operands[0]) + 1 if inst.op == "s_nop" else 1)
        if inst.kind == isa.MFMA:
            mfmas.append((inst.defs[0], _units(inst.defs), _mfma_passes(inst.op, arch), 0))
        elif inst.kind == isa.VALU:
            valu_writes.append((_units(inst.defs), 0))
        if M0 in inst.defs:
            m0_since = 0
    return out
