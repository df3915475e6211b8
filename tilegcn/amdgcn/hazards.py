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

A second pass of the same shape (`_insert_valu_nops`, after the first: the nops it counts include those) places
the rules of `arch.valu_hazards` and the MFMA write-after-write / write-after-read rows: a transcendental's result
read by a non-transcendental VALU (`T.exp2(x) * 3`), a VALU write of an SGPR or VCC read by a VALU, a VMEM,
v_div_fmas or a v_readlane / v_writelane lane select, a VALU write of a VGPR read by v_readfirstlane / v_readlane
or a v_permlane*_swap (gfx950), any instruction's write of a VGPR (a load's too) read by a DPP instruction, a VALU
write of EXEC (v_cmpx) before a DPP, lane read / write, permlane swap or MFMA, a store of more than 8 bytes whose data a
VALU overwrites, and a VALU overwriting an MFMA's result or srcC. Which opcode plays which part (transcendental,
DPP, lane read / select and their operands, permlane swap, v_div_fmas, a wide store's data) is the instruction
table's (isa_table.HazardRoles), never the opcode's name; an opcode the table lacks is an InternalError.
docs/hazards.md is the sweep of LLVM's hazard recognizer these come from: every class for gfx942/gfx950, whether
tilegcn can reach it, and where it is handled. No lowering places instructions to meet a hazard: this pass places
every wait state.
"""
from __future__ import annotations

import functools

from . import cfg, isa
from .isa import EXEC, M0, VCC, Inst, Reg
from .isa_table import roles_of

_FORGET_AFTER = 32  # no hazard needs more wait states than this
_NO_VECTOR_READ = (isa.LABEL, isa.COMMENT, isa.WAIT, isa.BARRIER, isa.BRANCH, isa.SOPP, isa.SALU, isa.SMEM)


def _mfma_passes(inst: Inst, arch) -> int:
    return _passes_by_name(inst.op, arch.name, inst.suffix if "f8f6f4" in inst.op else "")


@functools.lru_cache(maxsize=None)
def _passes_by_name(op: str, arch_name: str, modifiers: str = "") -> int:
    """Passes of MFMA `op`; gfx950's f8f6f4 forms (scaled or not) by the operand formats their cbsz / blgp
    modifiers name (arch.f8f6f4_passes: 16 with an 8-bit operand, 8 with two fp4 ones for 32x32x64)."""
    from .arch import f8f6f4_passes, get_arch

    arch = get_arch(arch_name)
    if "f8f6f4" in op:
        mods = dict(w.split(":") for w in modifiers.split() if w.startswith(("cbsz:", "blgp:")))
        return f8f6f4_passes(arch.lowp_mfmas[op], int(mods.get("cbsz", 0)), int(mods.get("blgp", 0)))
    for shapes in arch.mfma_shapes.values():
        for shape in shapes:
            if op.startswith(shape.name_template.format(dtype="")):
                return shape.passes
    # the mixed fp8 x bf8 forms T.gemm emits for e4m3 x e5m2 (the arch's 8-bit shapes name only the fp8_fp8 and
    # bf8_bf8 ones): their passes are the emulator's table's, the same as those of the unmixed shape
    lowp = get_arch(arch_name).lowp_mfmas.get(op)
    if lowp is not None and lowp.a_type in ("fp8", "bf8"):
        return lowp.passes
    raise ValueError(f"unknown MFMA {op}")


class Recent:
    """Recent MFMA results {(dst Reg, passes): wait states since}, VALU writes {units: since} and the wait states
    since M0's write (the dataflow state between blocks). Within a block the pass keeps, per register unit, the
    newest MFMA / VALU write of it with its issue time on a clock (`now`), so checking and issuing an instruction
    cost O(its registers)."""

    __slots__ = ("mfma_of", "valu_at", "m0_at", "now")

    def __init__(self, mfmas=None, valu_writes=None, m0_since: int = _FORGET_AFTER):
        self.now = 0
        self.mfma_of = {}  # unit -> (issue time, passes, dst Reg) of the newest MFMA writing it
        for (dst, passes), since in sorted((mfmas or {}).items(), key=lambda kv: -kv[1]):  # oldest first
            for u in dst.unit_ids:
                self.mfma_of[u] = (-since, passes, dst)
        self.valu_at = {}  # unit -> issue time of the newest VALU write
        for units, since in sorted((valu_writes or {}).items(), key=lambda kv: -kv[1]):
            for u in units:
                self.valu_at[u] = -since
        self.m0_at = -m0_since

    def since(self) -> tuple:
        now = self.now
        mfmas, valu = {}, {}
        for t, passes, dst in self.mfma_of.values():
            if now - t < _FORGET_AFTER:
                mfmas[(dst, passes)] = now - t
        for u, t in self.valu_at.items():
            if now - t < _FORGET_AFTER:
                valu[frozenset((u,))] = now - t
        return mfmas, valu, min(now - self.m0_at, _FORGET_AFTER)

    def copy(self) -> "Recent":
        return Recent(*self.since())

    def __eq__(self, other):
        return self.since() == other.since()

    def join(self, other: "Recent") -> "Recent":
        (mfmas, valu, m0), (o_mfmas, o_valu, o_m0) = self.since(), other.since()
        for k, s in o_mfmas.items():
            mfmas[k] = min(s, mfmas.get(k, s))
        for k, s in o_valu.items():
            valu[k] = min(s, valu.get(k, s))
        return Recent(mfmas, valu, min(m0, o_m0))


_NOT_ISSUED = (0, False, False, (), (), None)  # a label or comment: no wait state, reads and writes nothing
_ISSUED = (1, False, False, (), (), None)  # SALU, waits, barriers, branches...: one wait state, no vector read


def _facts(inst: Inst, arch) -> tuple:
    """What the pass needs of one instruction, computed once per pass (a loop block is transferred several
    times): (wait states it takes, writes M0, is an LDS DMA, units it reads (non-MFMA), units a VALU writes,
    MFMA facts or None: (srcA/B units, srcC Reg, srcC units, all source units, passes, dst Reg, dst units))."""
    kind = inst.kind
    if kind in (isa.LABEL, isa.COMMENT):
        return _NOT_ISSUED
    states = int(inst.operands[0]) + 1 if inst.op == "s_nop" else 1  # an s_nop N is N+1 wait states
    m0 = M0 in inst.defs
    if kind in _NO_VECTOR_READ:
        return _ISSUED if states == 1 and not m0 else (states, m0, False, (), (), None)
    if kind == isa.MFMA:
        uses = inst.uses
        # srcA, srcB and a scaled MFMA's two scale registers (uses[3:]) are read at issue as srcA / srcB are
        src_ab = tuple([u for r in uses[:2] + uses[3:] for u in r.unit_ids])
        src_c_reg = uses[2] if len(uses) > 2 else None
        src_c = src_c_reg.unit_ids if src_c_reg is not None else ()
        mfma = (src_ab, src_c_reg, src_c, src_ab + src_c, _mfma_passes(inst, arch), inst.defs[0],
                inst.defs[0].unit_ids)
        return states, m0, False, (), (), mfma
    valu_units = inst.def_units if kind == isa.VALU else ()
    return states, m0, kind == isa.LDS_DMA, inst.use_units, valu_units, None


def _events(blks: list, arch) -> dict:
    """id(block's instruction list) -> [(position, _facts)] of the block's instructions that matter to a rule,
    computed once (a loop block is transferred several times). Every other instruction takes one wait state and
    touches no state, so the transfer counts them by their positions and copies them as list slices. Left out of
    the facts (so of the events) is what no rule can use: a read of a register no MFMA writes never needs wait
    states, and a VALU write of one no MFMA reads never makes a hazard; a VALU instruction too far from every MFMA
    of its block (and from the block's ends) for either rule is not looked at (_near_mfma: most of a GEMM's
    address arithmetic and epilogue conversions); an MFMA's sources are checked only against the MFMA or VALU
    writes that can reach them (_mfma_sources)."""
    mfmas = [inst for blk in blks for inst in blk.insts if inst.kind == isa.MFMA]
    mfma_writes = set().union(*[inst.def_units for inst in mfmas])
    mfma_reads = set().union(*[inst.use_units for inst in mfmas])
    hz = arch.every_mfma_hazard
    events = {}
    valu_writes = set()  # units VALU instructions write that MFMAs read
    valu, mfma_kind = isa.VALU, isa.MFMA
    mfma_facts: dict = {}
    for blk in blks:
        mine = []
        near = _near_mfma(blk.insts, max(hz.vdst_to_read.values()), hz.valu_write_to_mfma_src)
        for pos, inst in enumerate(blk.insts):
            if inst.kind == valu:  # (most instructions: inline, as _facts makes them)
                m0 = M0 in inst.defs
                if not (near[pos] or m0):
                    continue
                uses, defs = inst.use_units, inst.def_units
                reads = () if mfma_writes.isdisjoint(uses) else uses
                valu_units = () if mfma_reads.isdisjoint(defs) else defs
                if reads or valu_units or m0:
                    mine.append((pos, 1, m0, False, reads, valu_units, None))
                    valu_writes.update(valu_units)
                continue
            if inst.kind == mfma_kind:  # (a GEMM's MFMAs repeat a few dozen operand tuples: facts once each)
                key = (inst.op, inst.uses, inst.defs)
                facts = mfma_facts.get(key)
                if facts is None:
                    facts = mfma_facts[key] = _facts(inst, arch)
                mine.append((pos,) + facts)
                continue
            facts = states, m0, lds_dma, reads, valu_units, mfma = _facts(inst, arch)
            if reads and mfma_writes.isdisjoint(reads):
                facts = states, m0, lds_dma, (), valu_units, mfma
            if facts != _ISSUED:
                mine.append((pos,) + facts)
        events[id(blk.insts)] = mine
    dsts, overlapping = {inst.defs[0] for inst in mfmas}, {}
    sources = {id(facts[5]): _mfma_sources(mfma_writes, valu_writes, dsts, overlapping, facts[5])
               for facts in mfma_facts.values()}
    return {key: [event if event[6] is None else event[:6] + (sources[id(event[6])],) for event in mine]
            for key, mine in events.items()}


def _near_mfma(insts: list, after: int, before: int) -> bytearray:
    """Per position of the block: 1 where an instruction is at most `after` wait states behind an MFMA of the
    block or its start (where a read of an MFMA result may need wait states), or at most `before` ahead of an MFMA
    or the block's end (where a VALU write may be too close to an MFMA reading it). Every issued instruction is at
    least one wait state, a label or comment none: the windows widen by those the block holds."""
    kinds = [inst.kind for inst in insts]
    silent = kinds.count(isa.LABEL) + kinds.count(isa.COMMENT)
    after, before, n = after + silent, before + silent, len(insts)
    near = bytearray(n + after)  # (a window past the end writes the padding: no clipping)
    ones_after, ones_before = b"\x01" * after, b"\x01" * before
    near[:after] = ones_after
    near[max(n - before, 0):n] = ones_before[:n - max(n - before, 0)]
    for m in [pos for pos, kind in enumerate(kinds) if kind == isa.MFMA]:
        near[m + 1:m + 1 + after] = ones_after
        near[max(m - before, 0):m] = ones_before[:m - max(m - before, 0)]
    return near


def _mfma_sources(mfma_writes: set, valu_writes: set, dsts: set, overlapping: dict, mfma: tuple) -> tuple:
    """An MFMA's facts (the last field of _facts) with its source units cut to those a rule can use: srcA/B to
    units MFMAs write, all sources to units VALU instructions write, and srcC to none when no other MFMA result
    (`dsts`) overlaps it (the registers an MFMA accumulates into are then always exactly the previous result's: no
    wait states)."""
    src_ab, src_c_reg, src_c, src_abc, passes, dst, dst_units = mfma
    if src_c_reg is not None:
        if src_c_reg not in overlapping:  # (a kernel has a few accumulator tuples, each used by many MFMAs)
            overlapping[src_c_reg] = any(d is not src_c_reg and not set(src_c).isdisjoint(d.unit_ids) for d in dsts)
        if not overlapping[src_c_reg]:
            src_c = ()
    return (tuple(mfma_writes.intersection(src_ab)), src_c_reg, src_c, tuple(valu_writes.intersection(src_abc)),
            passes, dst, dst_units)


def _pad_with_nops(out: list, need: int, max_nop: int) -> int:
    """Append s_nops giving `need` wait states (an `s_nop n-1` is n of them, at most `max_nop` each); returns
    `need`, the wait states they take (0 when none are needed)."""
    left = need
    while left > 0:
        n = min(left, max_nop)
        out.append(Inst("s_nop", (n - 1,), kind=isa.SOPP))
        left -= n
    return max(need, 0)


def _transfer(arch, events: dict):
    hz = arch.every_mfma_hazard
    vdst_to_read, vdst_to_srcc_overlap, valu_to_mfma = hz.vdst_to_read, hz.vdst_to_srcc_overlap, \
        hz.valu_write_to_mfma_src
    m0_to_dma = arch.m0_write_to_lds_dma_nops + 1
    max_nop = arch.max_nop + 1

    def transfer(insts: list, state: Recent):
        """One pass over the block's events on a wait-state clock (`now`): what an instruction still needs is its
        hazard's wait states minus those since the newest write of each register it reads."""
        state = state.copy()
        mfma_of, valu_at, now, m0_at = state.mfma_of, state.valu_at, state.now, state.m0_at
        out: list = []
        copied = last = 0  # insts[:copied] are in `out`; `now` counts the wait states of insts[:last]
        for pos, states, m0, lds_dma, reads, valu_units, mfma in events[id(insts)]:
            now += pos - last  # the instructions between events: one wait state each
            need = 0
            if lds_dma:
                need = m0_to_dma - (now - m0_at)
            if mfma is not None:
                src_ab, src_c_reg, src_c, src_abc, _, _, _ = mfma
                for u in src_ab:
                    if u in mfma_of:
                        t, passes, _ = mfma_of[u]
                        need = max(need, vdst_to_read[passes] - (now - t))
                for u in src_c:
                    if u in mfma_of:
                        t, passes, dst = mfma_of[u]
                        if dst != src_c_reg:  # accumulating into exactly the same registers needs none
                            need = max(need, vdst_to_srcc_overlap[passes] - (now - t))
                for u in src_abc:
                    if u in valu_at:
                        need = max(need, valu_to_mfma - (now - valu_at[u]))
            elif reads and mfma_of:
                for u in reads:
                    if u in mfma_of:
                        t, passes, _ = mfma_of[u]
                        need = max(need, vdst_to_read[passes] - (now - t))
            if need > 0:
                out += insts[copied:pos]
                copied = pos
            now += _pad_with_nops(out, need, max_nop)
            now += states
            last = pos + 1
            if mfma is not None:
                entry = (now, mfma[4], mfma[5])
                for u in mfma[6]:
                    mfma_of[u] = entry
            else:
                for u in valu_units:
                    valu_at[u] = now
            if m0:
                m0_at = now
        out += insts[copied:]
        state.now, state.m0_at = now + len(insts) - last, m0_at
        return out, state

    return transfer


def insert_hazard_nops(insts: list, arch) -> list:
    blks = cfg.blocks(insts)
    insts = cfg.solve(blks, Recent(), _transfer(arch, _events(blks, arch)),
                      lambda a, b: b.copy() if a is None else a.join(b))
    return _insert_valu_nops(insts, arch)


# ---- the VALU-side rules (arch.valu_hazards, MfmaHazards' write-after-write / write-after-read rows) -------------
# What an instruction leaves behind, keyed (class, unit) -> its issue time: the result of a transcendental, an SGPR
# or VCC a VALU wrote, a VGPR a VALU wrote (only those a lane read, a permlane swap or a DPP reads), a VGPR any
# instruction wrote (a load's too: only those a DPP reads; an MFMA's VGPR result is the first pass's longer MFMA read
# row), EXEC a VALU wrote (v_cmpx), the data of a wide store, and ("dst" / "srcc", passes) an MFMA's result and srcC.
_TRANS, _SGPR, _VGPR, _VDEF, _EXEC, _STORE = "trans", "sgpr", "vgpr", "vdef", "exec", "store"
_DSTSEL = "dstsel"  # a VGPR an SDWA instruction wrote part of (dst_sel not DWORD)
_SGPR_FILES = ("s", "vcc")


class Written:
    """The VALU-side dataflow state: {(class, unit): issue time} on a wait-state clock (`now`), each class
    forgotten once no rule can need it (`windows`)."""

    __slots__ = ("at", "now", "windows")

    def __init__(self, windows: dict, since: dict | None = None):
        self.windows, self.now = windows, 0
        self.at = {key: -ago for key, ago in (since or {}).items()}

    def since(self) -> dict:
        now, windows = self.now, self.windows
        return {key: now - t for key, t in self.at.items() if now - t < windows[key[0]]}

    def __eq__(self, other):
        return self.since() == other.since()

    def join(self, other: "Written") -> "Written":
        mine = self.since()
        for key, ago in other.since().items():
            mine[key] = min(ago, mine.get(key, ago))
        return Written(self.windows, mine)


def _valu_windows(arch) -> dict:
    """Class -> the most wait states a rule of it needs (a state entry is forgotten after that many)."""
    vh, mh = arch.valu_hazards, arch.every_mfma_hazard
    return {_TRANS: vh.trans_to_valu_read,
            _SGPR: max(vh.valu_sgpr_to_valu_read, vh.valu_sgpr_to_vmem_read, vh.valu_vcc_to_div_fmas,
                       vh.valu_sgpr_to_lane_select),
            _VGPR: max(vh.valu_to_readlane_src, vh.valu_to_permlane_swap), _VDEF: vh.vgpr_write_to_dpp_read,
            _EXEC: max(vh.valu_exec_to_dpp, vh.valu_exec_to_lane_op, vh.valu_exec_to_permlane_swap,
                       vh.valu_exec_to_mfma),
            _STORE: vh.wide_store_to_valu_write, _DSTSEL: vh.dst_sel_to_valu_read,
            "dst": max(mh.vdst_to_valu_write.values()), "srcc": max(mh.srcc_to_valu_write.values())}


def _writes_part(inst: Inst) -> bool:
    """An SDWA instruction writing part of its destination (dst_sel other than DWORD): LLVM's dst-sel forwarding
    producer (tilegcn emits no VOP3 op_sel write of a high half, the rule's other producer)."""
    return inst.op.endswith("_sdwa") and "dst_sel:" in inst.suffix and "dst_sel:DWORD" not in inst.suffix


def _wide_store_data(inst: Inst):
    """The data register of a store the 12-dword-store rule covers, else None: more than 8 bytes (the table's
    wide_store_data), and for MUBUF an soffset that is not an SGPR (tilegcn's literal 0)."""
    roles = roles_of(inst.op)
    if roles.wide_store_data is None:
        return None
    if roles.store_soffset is not None and isinstance(inst.operands[roles.store_soffset], Reg):
        return None
    return inst.operands[roles.wide_store_data]


def _reads_exec_late(inst: Inst) -> bool:
    """Whether a VALU write of EXEC shortly before `inst` is a hazard: an MFMA, or a VALU the table says reads EXEC
    late (DPP, lane reads / writes, permlane swaps; EXEC is none of its listed uses)."""
    return inst.kind == isa.MFMA or (inst.kind == isa.VALU and roles_of(inst.op).reads_exec_late)


def _vector_units(inst: Inst) -> set:
    """The VGPR units an instruction names, sources and destinations: a DPP reads its destination's old value (the
    lanes it does not write keep it; LLVM's rule counts it), a permlane swap reads both operands."""
    return {u for r in (*inst.uses, *inst.defs) if r.file == "v" for u in r.unit_ids}


def _lane_select(inst: Inst, roles) -> tuple:
    """The units of v_readlane / v_writelane's lane select (an SGPR, M0 or a constant: none)."""
    sel = inst.operands[roles.lane_select] if len(inst.operands) > roles.lane_select else None
    return sel.unit_ids if isinstance(sel, Reg) else ()


def _lane_source(inst: Inst, roles) -> tuple:
    """The units of the VGPR v_readlane / v_readfirstlane reads one lane of."""
    return inst.operands[roles.lane_source].unit_ids


def _produced(insts: list, arch) -> dict:
    """Key prefix -> the units some instruction of the program leaves behind under it and another could pair
    with: the rules' producers are rare (transcendentals, VALU writes of SGPRs, wide stores, VGPRs a lane read, a
    permlane swap or a DPP reads, MFMA registers a VALU also writes), so most instructions meet none of them (one
    set test each)."""
    made: dict = {(_TRANS,): set(), (_SGPR,): set(), (_VGPR,): set(), (_VDEF,): set(), (_EXEC,): set(),
                  (_STORE,): set(), (_DSTSEL,): set()}
    valu_defs, mfmas, exec_readers = set(), [], False
    for inst in insts:
        kind = inst.kind
        if kind == isa.VALU:
            valu_defs.update(inst.def_units)
            roles = roles_of(inst.op)
            if roles.trans:
                made[(_TRANS,)].update(inst.def_units)
            if _writes_part(inst):
                made[(_DSTSEL,)].update(inst.def_units)
            for r in inst.defs:
                if r.file in _SGPR_FILES:
                    made[(_SGPR,)].update(r.unit_ids)
                elif r.file == "exec":
                    made[(_EXEC,)].update(r.unit_ids)
            if roles.lane_source is not None:
                made[(_VGPR,)].update(_lane_source(inst, roles))
            if roles.permlane_swap:
                made[(_VGPR,)].update(_vector_units(inst))
            if roles.dpp:
                made[(_VDEF,)].update(_vector_units(inst))
            exec_readers = exec_readers or roles.reads_exec_late
        elif kind == isa.MFMA:
            mfmas.append(inst)
            exec_readers = True
        elif kind == isa.VMEM_STORE:
            data = _wide_store_data(inst)
            if data is not None:
                made[(_STORE,)].update(data.unit_ids)
    if not exec_readers:
        made[(_EXEC,)] = set()
    for inst in mfmas:
        p = _mfma_passes(inst, arch)
        made.setdefault(("dst", p), set()).update(valu_defs.intersection(inst.defs[0].unit_ids))
        if len(inst.uses) > 2:  # srcC a register (the accumulator fill's is a constant)
            made.setdefault(("srcc", p), set()).update(valu_defs.intersection(inst.uses[2].unit_ids))
    return {key: units for key, units in made.items() if units}


def _valu_facts(inst: Inst, arch, made: dict) -> tuple:
    """(wait states it takes, [(key prefix, units) it leaves behind], [(key prefix, units, wait states) it needs]),
    units cut to those of `made` (_produced)."""
    kind = inst.kind
    if kind in (isa.LABEL, isa.COMMENT):
        return 0, (), ()
    states = int(inst.operands[0]) + 1 if inst.op == "s_nop" else 1
    makes, needs = [], []
    if kind == isa.VALU:
        vh, mh = arch.valu_hazards, arch.every_mfma_hazard
        uses, defs = inst.use_units, inst.def_units
        roles = roles_of(inst.op)
        trans = roles.trans
        for key, units in made.items():
            cls = key[0]
            if not units.isdisjoint(defs):
                if cls in (_SGPR, _VGPR, _VDEF, _EXEC) or (cls == _TRANS and trans) or \
                        (cls == _DSTSEL and _writes_part(inst)):
                    makes.append((key, units.intersection(defs)))
                elif cls == _STORE:
                    needs.append((key, units.intersection(defs), vh.wide_store_to_valu_write))
                elif cls == "dst":
                    needs.append((key, units.intersection(defs), mh.vdst_to_valu_write[key[1]]))
                elif cls == "srcc":
                    needs.append((key, units.intersection(defs), mh.srcc_to_valu_write[key[1]]))
            if units.isdisjoint(uses):
                continue
            if cls == _TRANS and not trans:
                needs.append((key, units.intersection(uses), vh.trans_to_valu_read))
            elif cls == _SGPR:
                needs.append((key, units.intersection(uses), vh.valu_sgpr_to_valu_read))
            elif cls == _DSTSEL:
                needs.append((key, units.intersection(uses), vh.dst_sel_to_valu_read))
        if roles.reads_vcc_late or roles.reads_exec_late:  # (rare: v_div_fmas and the cross-lane instructions)
            needs += _cross_lane_needs(inst, roles, vh, made)
    elif kind == isa.MFMA:
        p = _mfma_passes(inst, arch)
        for key, units in ((("dst", p), inst.defs[0].unit_ids), (("srcc", p), inst.uses[2].unit_ids if
                                                                    len(inst.uses) > 2 else ())):
            if key in made and not made[key].isdisjoint(units):
                makes.append((key, made[key].intersection(units)))
        if (_EXEC,) in made:
            needs.append(((_EXEC,), made[(_EXEC,)], arch.valu_hazards.valu_exec_to_mfma))
    else:
        vdef = made.get((_VDEF,))
        if vdef and not vdef.isdisjoint(inst.def_units):  # a load's VGPRs: a DPP reading them counts from its issue
            makes.append(((_VDEF,), vdef.intersection(inst.def_units)))
        if kind in (isa.VMEM_LOAD, isa.VMEM_STORE, isa.LDS_DMA):
            sgprs = made.get((_SGPR,))
            if sgprs and not sgprs.isdisjoint(inst.use_units):
                needs.append(((_SGPR,), sgprs.intersection(inst.use_units), arch.valu_hazards.valu_sgpr_to_vmem_read))
            stored = made.get((_STORE,))
            data = _wide_store_data(inst) if stored and kind == isa.VMEM_STORE else None
            if data is not None:
                makes.append(((_STORE,), stored.intersection(data.unit_ids)))
    return states, makes, [n for n in needs if n[1] and n[2] > 0]


def _cross_lane_needs(inst: Inst, roles, vh, made: dict) -> list:
    """The needs of the VALU ops the rules single out (isa_table.HazardRoles): v_div_fmas reads VCC late; a lane
    read its lane source, v_readlane / v_writelane their lane select; DPP every VGPR it names, a permlane swap both
    operands; all of these but v_div_fmas EXEC."""
    lane_op = roles.lane_source is not None or roles.lane_select is not None
    wanted = []
    if roles.reads_vcc_late:
        wanted.append((_SGPR, VCC.unit_ids, vh.valu_vcc_to_div_fmas))
    if roles.lane_source is not None:
        wanted.append((_VGPR, _lane_source(inst, roles), vh.valu_to_readlane_src))
    if roles.lane_select is not None:
        wanted.append((_SGPR, _lane_select(inst, roles), vh.valu_sgpr_to_lane_select))
    if lane_op:
        wanted.append((_EXEC, EXEC.unit_ids, vh.valu_exec_to_lane_op))
    if roles.dpp:
        wanted += [(_VDEF, _vector_units(inst), vh.vgpr_write_to_dpp_read), (_EXEC, EXEC.unit_ids, vh.valu_exec_to_dpp)]
    if roles.permlane_swap:
        wanted += [(_VGPR, _vector_units(inst), vh.valu_to_permlane_swap),
                   (_EXEC, EXEC.unit_ids, vh.valu_exec_to_permlane_swap)]
    needs = []
    for cls, units, ws in wanted:
        produced = made.get((cls,))
        if produced and ws > 0 and not produced.isdisjoint(units):
            needs.append(((cls,), produced.intersection(units), ws))
    return needs


def _valu_events(blks: list, arch) -> dict:
    """id(block's instruction list) -> [(position, wait states, makes, needs)] of its instructions that leave
    behind or need a unit of `_produced`, or take other than one wait state; everything else takes one wait state
    and is counted by position (as _events does)."""
    made = _produced([inst for blk in blks for inst in blk.insts], arch)
    any_made = set().union(*made.values())
    exec_written = (_EXEC,) in made
    silent = (isa.LABEL, isa.COMMENT)
    events = {}
    for blk in blks:
        mine = []
        for pos, inst in enumerate(blk.insts):
            kind = inst.kind
            if kind not in silent and inst.op != "s_nop" and (kind in _NO_VECTOR_READ or (
                    any_made.isdisjoint(inst.use_units) and any_made.isdisjoint(inst.def_units)
                    and not (exec_written and _reads_exec_late(inst)))):
                continue  # one wait state, nothing a rule looks at
            states, makes, needs = _valu_facts(inst, arch, made)
            if makes or needs or states != 1:
                mine.append((pos, states, makes, needs))
        events[id(blk.insts)] = mine
    return events


def _valu_transfer(arch, events: dict):
    max_nop = arch.max_nop + 1

    def transfer(insts: list, state: Written):
        at, now = dict(state.at), state.now
        out: list = []
        copied = last = 0
        for pos, states, makes, needs in events[id(insts)]:
            now += pos - last
            need = 0
            for prefix, units, ws in needs:
                for u in units:
                    t = at.get(prefix + (u,))
                    if t is not None and ws - (now - t) > need:
                        need = ws - (now - t)
            if need > 0:
                out += insts[copied:pos]
                copied = pos
            now += _pad_with_nops(out, need, max_nop)
            now += states
            last = pos + 1
            for prefix, units in makes:
                for u in units:
                    at[prefix + (u,)] = now
        out += insts[copied:]
        after = Written(state.windows)
        after.at, after.now = at, now + len(insts) - last
        return out, after

    return transfer


def _insert_valu_nops(insts: list, arch) -> list:
    blks = cfg.blocks(insts)
    return cfg.solve(blks, Written(_valu_windows(arch)), _valu_transfer(arch, _valu_events(blks, arch)),
                     lambda a, b: Written(b.windows, b.since()) if a is None else a.join(b))
