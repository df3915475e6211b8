"""The emulated device's check of the VALU-side wait states (docs/hazards.md; the numbers are the arch table's
`valu_hazards` and MFMA write-after-write / write-after-read rows, each checked against llc by
tests/test_hazards_llvm.py).

What an instruction leaves behind, by kind: "trans" the registers a transcendental wrote, "vgpr" those
any VALU wrote, "vdef" the VGPRs any VALU, DS or VMEM instruction wrote (a load's destination counts from its
issue), "sgpr" the SGPRs (VCC too) a VALU wrote, "exec" EXEC when a VALU (v_cmpx) wrote it, "store" the data
registers of a store of more than 8 bytes (a MUBUF one only when soffset is not an SGPR). What a later instruction
must not touch too soon: a non-transcendental VALU reading a "trans" register, a VALU reading an "sgpr" one
(v_div_fmas: VCC, longer; v_readlane / v_writelane's lane select, longer), a VMEM reading an "sgpr" one,
v_readfirstlane / v_readlane reading a "vgpr" one as the lane source, a v_permlane*_swap reading a "vgpr" one, a DPP
instruction reading a "vdef" one (its destination's old value too), a DPP, lane read / write, permlane swap or
MFMA after an "exec" write, a VALU overwriting a "store" one, a VALU reading a "dstsel" one (a VGPR an SDWA
instruction wrote part of: dst_sel not DWORD), and a VALU overwriting an MFMA's result or its srcC.

The facts are derived here from the decoded instructions, not from the compiler's hazard pass, so the two are
checked against llc separately. Which part an opcode plays (transcendental, DPP, lane source / select, permlane
swap, v_div_fmas, a wide store's data and soffset) is the instruction table's HazardRoles (tilegcn/amdgcn/
isa_table.py, itself checked against llvm-mc and this emulator's decoder); the rules that use them are this
module's own. Producers ride in the group's `valu_recs` ([t_end, vgprs written, pc, waves]),
which the MFMA source check reads too (`RecentWrites.tracked` says which instructions go there); the facts are
kept per program.
"""
from __future__ import annotations

import functools

from ...amdgcn.isa_table import TABLE, HazardRoles
from .decode import EXEC_HI, EXEC_LO, VCC_HI, VCC_LO, Reg
from .state import Fault

_VCC = frozenset((VCC_LO, VCC_HI))
_EXEC = frozenset((EXEC_LO, EXEC_HI))
# the roles of an instruction the table lacks, by whether its encoding is DPP (table_roles)
_UNLISTED = {dpp: HazardRoles(trans=False, dpp=dpp, permlane_swap=False, reads_vcc_late=False, lane_source=None,
                              lane_select=None, wide_store_data=None, store_soffset=None) for dpp in (False, True)}
_WHAT = {
    "trans": "reads {reg}, the result of the transcendental",
    "sgpr": "reads {reg}, written by the VALU instruction",
    "vgpr": "reads {reg}, written by the VALU instruction",
    "vdef": "reads {reg} through DPP, written by",
    "exec": "reads EXEC, written by the VALU instruction",
    "store": "overwrites {reg}, the data of the wide store",
    "dstsel": "reads {reg}, part of which the SDWA instruction wrote",
}


class RecentWrites:
    """Per instruction of one program: `made[i]` {kind: registers} it leaves behind (or None), `needs[i]` [(kind,
    registers, wait states)] it must not meet too soon (or None), `vw_after_mfma[i]` whether it is a VALU whose
    writes the MFMA write-after-write / write-after-read rows cover, `tracked[i]` whether its issue goes into
    g.valu_recs (a producer here, or a VALU write an MFMA source check needs), `checks[i]` whether `check` runs
    before it; `window` the most wait states any rule needs (0: the program has no pair a rule covers)."""

    def __init__(self, handlers, instrs, arch, accum_offset: int):
        vh, self.mfma = arch.valu_hazards, arch.every_mfma_hazard
        facts = [_facts(h, ins, vh, accum_offset) for h, ins in zip(handlers, instrs)]
        # only registers some other instruction of the program pairs with (most VMEM read SRDs that SALU writes,
        # most VALU writes meet no rule): most instructions then cost one list lookup per step
        made_anywhere, needed_anywhere = _union(m.items() for m, _ in facts), _union(
            ((kind, regs) for kind, regs, _ in n) for _, n in facts)
        self.needs = [[(kind, regs & made_anywhere.get(kind, frozenset()), ws) for kind, regs, ws in needs]
                      for _, needs in facts]
        self.needs = [[n for n in needs if n[1]] or None for needs in self.needs]
        self.made = [{kind: regs & needed_anywhere.get(kind, frozenset()) for kind, regs in made.items()}
                     for made, _ in facts]
        self.made = [{kind: regs for kind, regs in made.items() if regs} or None for made in self.made]
        self.mfma_present = any(h.mfma is not None for h in handlers)
        mfma_regs = frozenset().union(*[h.vw | h.mfma.c for h in handlers if h.mfma is not None])
        self.vw_after_mfma = [h.cls == "valu" and not h.vw.isdisjoint(mfma_regs) for h in handlers]
        self.tracked = [made is not None or (self.mfma_present and h.tracks_valu_write)
                        for made, h in zip(self.made, handlers)]
        self.window = max([n[2] for needs in self.needs if needs for n in needs], default=0)
        self.checks = [needs is not None or after for needs, after in zip(self.needs, self.vw_after_mfma)]


def _union(groups) -> dict:
    """kind -> frozenset of the registers of every (kind, registers) pair of `groups`."""
    out: dict = {}
    for pairs in groups:
        for kind, regs in pairs:
            out.setdefault(kind, set()).update(regs)
    return {kind: frozenset(regs) for kind, regs in out.items()}


@functools.lru_cache(maxsize=None)  # a pure lookup, asked per instruction of every program bound
def table_roles(base: str, suffix: str) -> HazardRoles:
    """The instruction table's hazard roles of a decoded instruction (its base name and encoding suffix, as
    decode.Instr has them). One the table lacks (hand-written assembly the emulator also runs: asm overrides, its
    own tests) plays no part a rule singles out, but DPP, which its encoding says."""
    dpp = suffix == "dpp"
    row = TABLE.get(base + "_dpp" if dpp else base)
    return row.hazard if row is not None else _UNLISTED[dpp]


def _facts(h, ins, vh, accum_offset) -> tuple:
    made, needs = {}, []
    roles = table_roles(ins.base, ins.suffix)
    if h.cls == "valu":
        if roles.trans:
            made["trans"] = h.vw
        else:
            needs.append(("trans", h.vr, vh.trans_to_valu_read))
        if h.vw:
            made["vgpr"] = made["vdef"] = h.vw
            needs.append(("store", h.vw, vh.wide_store_to_valu_write))
            if ins.suffix == "sdwa" and ins.mods.get("dst_sel", "DWORD") != "DWORD":
                made["dstsel"] = h.vw
        needs.append(("dstsel", h.vr, vh.dst_sel_to_valu_read))
        if h.sw:
            made["sgpr"] = h.sw
            if not h.sw.isdisjoint(_EXEC):
                made["exec"] = _EXEC
        reads = h.sr - _EXEC
        if reads:
            needs.append(("sgpr", reads, vh.valu_sgpr_to_valu_read))
        needs += _cross_lane_needs(h, ins, roles, vh, accum_offset)
        if roles.reads_vcc_late:
            needs.append(("sgpr", _VCC, vh.valu_vcc_to_div_fmas))
    elif h.mfma is not None:
        needs.append(("exec", _EXEC, vh.valu_exec_to_mfma))
    elif h.cls in ("vmem", "ds"):
        if h.cls == "vmem" and h.sr:
            needs.append(("sgpr", h.sr, vh.valu_sgpr_to_vmem_read))
        if h.vdef | h.vw:
            made["vdef"] = h.vdef | h.vw
        data = _wide_store_data(ins, roles) if h.cls == "vmem" else None
        if data is not None:
            made["store"] = _vector_regs(data, accum_offset)
    return made, [n for n in needs if n[1] and n[2] > 0]


def _cross_lane_needs(h, ins, roles, vh, accum_offset) -> list:
    """The rules of the cross-lane VALU instructions: lane reads / writes (their lane source and lane select), DPP
    (every VGPR it names: the destination's old value stays in the lanes it does not write) and permlane swaps
    (both operands), each also after a VALU write of EXEC."""
    needs, source, select = [], roles.lane_source, roles.lane_select
    if source is not None:
        needs.append(("vgpr", _vector_regs(ins.operands[source], accum_offset), vh.valu_to_readlane_src))
    if select is not None and len(ins.operands) > select:
        needs.append(("sgpr", _scalar_regs(ins.operands[select]), vh.valu_sgpr_to_lane_select))
    if source is not None or select is not None:
        needs.append(("exec", _EXEC, vh.valu_exec_to_lane_op))
    dpp, permlane = roles.dpp, roles.permlane_swap
    if dpp or permlane:
        named = frozenset(r for r in h.vr | h.vw if r < accum_offset)  # VGPRs, not AGPRs
        if dpp:
            needs += [("vdef", named, vh.vgpr_write_to_dpp_read), ("exec", _EXEC, vh.valu_exec_to_dpp)]
        else:
            needs += [("vgpr", named, vh.valu_to_permlane_swap), ("exec", _EXEC, vh.valu_exec_to_permlane_swap)]
    return needs


def _scalar_regs(op) -> frozenset:
    if not isinstance(op, Reg) or op.kind != "s":
        return frozenset()
    return frozenset(range(op.index, op.index + op.count))


def _wide_store_data(ins, roles):
    """The data operand of a store of more than 8 bytes that the 12-dword-store rule covers (a MUBUF one only when
    its soffset is not an SGPR), else None."""
    if roles.wide_store_data is None:
        return None
    offset = roles.store_soffset
    soffset = ins.operands[offset] if offset is not None and len(ins.operands) > offset else None
    if isinstance(soffset, Reg) and soffset.kind == "s":
        return None
    return ins.operands[roles.wide_store_data]


def _vector_regs(op, accum_offset) -> frozenset:
    if not isinstance(op, Reg) or op.kind not in "va":
        return frozenset()
    first = op.index + (accum_offset if op.kind == "a" else 0)
    return frozenset(range(first, first + op.count))


def check(m, g, h, pc):
    """Raise a HazardError Fault if `h` (about to issue in group `g`) meets a recent write too soon."""
    rw = m.prog.recent
    needs, t = rw.needs[pc], g.t
    if needs is not None:
        for t_end, _, src_pc, waves in g.valu_recs:
            made = rw.made[src_pc]
            if made is None:
                continue
            elapsed = t - t_end
            for kind, regs, ws in needs:
                if elapsed < ws and kind in made and not made[kind].isdisjoint(regs):
                    _raise(m, g, src_pc, waves, elapsed, ws, _WHAT[kind].format(reg=_name(m, kind, made[kind] & regs)))
    if rw.vw_after_mfma[pc] and g.mfma_recs:
        hz, handlers = rw.mfma, m.prog.handlers
        for t_end, dst, _, passes, src_pc, waves in g.mfma_recs:
            elapsed = t - t_end
            if elapsed < hz.vdst_to_valu_write[passes] and not dst.isdisjoint(h.vw):
                _raise(m, g, src_pc, waves, elapsed, hz.vdst_to_valu_write[passes],
                       f"overwrites {m.prog.reg_name(min(dst & h.vw))}, the result of the MFMA")
            src_c = handlers[src_pc].mfma.c
            if elapsed < hz.srcc_to_valu_write[passes] and not src_c.isdisjoint(h.vw):
                _raise(m, g, src_pc, waves, elapsed, hz.srcc_to_valu_write[passes],
                       f"overwrites {m.prog.reg_name(min(src_c & h.vw))}, srcC of the MFMA")


def _name(m, kind, regs) -> str:
    reg = min(regs)
    if kind == "exec":
        return "exec"
    return m.prog.sreg_name(reg) if kind == "sgpr" else m.prog.reg_name(reg)


def _raise(m, g, src_pc, waves, elapsed, need, what):
    producer = m.prog.handlers[src_pc]
    wave = min(waves) if waves is not None else g.waves[0]
    raise Fault(f"{what} `{producer.text}` (pc 0x{producer.addr:x}) {elapsed} wait states before; "
                f"{m.arch.name} needs {need} (add s_nop)", wave, None, "HazardError", global_wave=True)
