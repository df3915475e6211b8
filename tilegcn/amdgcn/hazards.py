"""Hazard nops: `s_nop` where the arch needs wait states between dependent instructions.

Input: instructions with waits placed, any control flow. Output: the same with `s_nop N` (N+1 wait states)
inserted. Rules come from the arch table (`arch.mfma_hazards`): an MFMA's result read by VALU, memory ops,
v_accvgpr_read or as another MFMA's srcA/srcB needs `vdst_to_read[passes]` wait states; as srcC of
exactly the same registers none (back-to-back accumulation), of partially overlapping ones
`vdst_to_srcc_overlap[passes]`; a VALU write (v_accvgpr_write included) read by an MFMA needs
`valu_write_to_mfma_src`; an LDS DMA (which reads M0) right after a SALU write of M0 needs
`m0_write_to_lds_dma_nops + 1`. Every issued instruction (a branch too) counts one wait state.

The state (recent MFMA results, VALU writes and the M0 write, each with the wait states since) is a forward
dataflow problem over the control-flow graph (cfg.py): at the loop head the state of the preheader and of the
loop's tail meet (the smaller count wins), so an MFMA at the end of one iteration is seen by the first
instructions of the next.
"""
from __future__ import annotations

from . import cfg, isa
from .isa import M0, Inst

_FORGET_AFTER = 32  # no hazard needs more wait states than this
_NO_VECTOR_READ = (isa.LABEL, isa.COMMENT, isa.WAIT, isa.BARRIER, isa.BRANCH, isa.SOPP, isa.SALU, isa.SMEM)


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


class Recent:
    """MFMA results {(dst Reg, passes): since}, VALU writes {units: since} and wait states since M0's write."""

    __slots__ = ("mfmas", "valu_writes", "m0_since")

    def __init__(self, mfmas=None, valu_writes=None, m0_since: int = _FORGET_AFTER):
        self.mfmas = dict(mfmas or {})
        self.valu_writes = dict(valu_writes or {})
        self.m0_since = m0_since

    def copy(self) -> "Recent":
        return Recent(self.mfmas, self.valu_writes, self.m0_since)

    def __eq__(self, other):
        return (self.mfmas, self.valu_writes, self.m0_since) == (other.mfmas, other.valu_writes, other.m0_since)

    def join(self, other: "Recent") -> "Recent":
        mfmas, valu = dict(self.mfmas), dict(self.valu_writes)
        for k, s in other.mfmas.items():
            mfmas[k] = min(s, mfmas.get(k, s))
        for k, s in other.valu_writes.items():
            valu[k] = min(s, valu.get(k, s))
        return Recent(mfmas, valu, min(self.m0_since, other.m0_since))

    def advance(self, states: int):
        self.m0_since = min(self.m0_since + states, _FORGET_AFTER)
        self.mfmas = {k: s + states for k, s in self.mfmas.items() if s + states < _FORGET_AFTER}
        self.valu_writes = {k: s + states for k, s in self.valu_writes.items() if s + states < _FORGET_AFTER}

    def required(self, inst: Inst, arch) -> int:
        """Wait states `inst` still needs."""
        hz = arch.mfma_hazards
        need = 0
        if inst.kind == isa.LDS_DMA:
            need = max(need, arch.m0_write_to_lds_dma_nops + 1 - self.m0_since)
        if inst.kind == isa.MFMA:
            src_ab = _units(inst.uses[:2])
            src_c_reg = inst.uses[2] if len(inst.uses) > 2 else None
            src_c = _units([src_c_reg]) if src_c_reg is not None else set()
            for (dst_reg, passes), since in self.mfmas.items():
                dst = _units([dst_reg])
                if dst & src_ab:
                    need = max(need, hz.vdst_to_read[passes] - since)
                if dst & src_c and dst_reg != src_c_reg:
                    need = max(need, hz.vdst_to_srcc_overlap[passes] - since)
            for dst, since in self.valu_writes.items():
                if dst & (src_ab | src_c):
                    need = max(need, hz.valu_write_to_mfma_src - since)
        elif inst.kind not in _NO_VECTOR_READ:
            reads = _units(inst.uses)
            for (dst_reg, passes), since in self.mfmas.items():
                if _units([dst_reg]) & reads:
                    need = max(need, hz.vdst_to_read[passes] - since)
        return need

    def issued(self, inst: Inst, arch):
        self.advance(int(inst.operands[0]) + 1 if inst.op == "s_nop" else 1)
        if inst.kind == isa.MFMA:
            self.mfmas[(inst.defs[0], _mfma_passes(inst.op, arch))] = 0
        elif inst.kind == isa.VALU:
            self.valu_writes[frozenset(_units(inst.defs))] = 0
        if M0 in inst.defs:
            self.m0_since = 0


def _transfer(arch):
    def transfer(insts: list, state: Recent):
        state = state.copy()
        out: list = []
        for inst in insts:
            need = state.required(inst, arch)
            while need > 0:
                n = min(need, arch.max_nop + 1)
                nop = Inst("s_nop", (n - 1,), kind=isa.SOPP)
                out.append(nop)
                state.issued(nop, arch)
                need -= n
            out.append(inst)
            if inst.kind not in (isa.LABEL, isa.COMMENT):
                state.issued(inst, arch)
        return out, state

    return transfer


def insert_hazard_nops(insts: list, arch) -> list:
    return cfg.solve(cfg.blocks(insts), Recent(), _transfer(arch), lambda a, b: b.copy() if a is None else a.join(b))
