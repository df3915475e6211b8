"""Wait-count insertion: a `s_waitcnt` right before the first instruction that needs a result.

Input: instructions with defs/uses/kinds and no waits, any control flow (labels, branches, loops). Output: the
same with `s_waitcnt vmcnt(N) lgkmcnt(M)` inserted where a register produced by an in-flight memory op is read
or overwritten. Per counter the state is, for every register unit an in-flight op will write, the number of ops
of that counter issued after it (`dist`): the unit is written once at most `dist` ops are outstanding, so the
wait is exactly `vmcnt(dist)` — counting tickets rather than draining. The state is a forward dataflow problem
over the control-flow graph (cfg.py): at a join (the loop head: the preheader and the back-edge) a unit keeps its
smallest distance, so a load issued in iteration i and consumed in i+1 gets the exact count on every path and
nothing is flushed at labels or branches.

Vector memory and LDS ops complete in order; scalar loads do not, so any outstanding s_load forces lgkmcnt(0).
LDS writes are memory effects, not registers: a ds_write or LDS DMA may name the LDS region it writes as a
pseudo-register (file "lds", `lds_tag`) in its defs. `s_barrier` publishes LDS writes to the other waves and does
not wait by itself (gfx90a and later), so before it the pass waits for every *untagged* LDS write, for every
`ds_read` in flight (another wave may overwrite what it reads right after the barrier) and for the
tagged regions the barrier lists in its uses; a tagged region nobody publishes yet (the next pipeline stage) stays
in flight across the barrier. Writing the same LDS region twice needs no wait (they are ordered).
"""
from __future__ import annotations

from . import cfg, isa, isa_table
from .isa import Inst, Reg, unit_id

_VM_KINDS = isa_table.kinds_counting("vm")  # vector memory and LDS DMA
_LGKM_KINDS = isa_table.kinds_counting("lgkm")  # LDS ops, lane exchanges through the LDS unit, scalar loads
_OUT_OF_ORDER = tuple(k.name for k in isa_table.KINDS.values() if k.counter and not k.in_order)  # scalar loads
_LDS_WRITES = (isa.DS_WRITE, isa.LDS_DMA)
LDS_FILE = "lds"
# Units are Reg.unit_ids (ints); these two pseudo-units take ids of LDS "registers" no lds_tag names.
UNTAGGED_LDS = unit_id((LDS_FILE, -1))  # the unit of every LDS write that names no region
LDS_READS = unit_id((LDS_FILE, -2))  # the unit of every ds_read: a barrier waits for them (another wave may write)


def lds_tag(n: int) -> Reg:
    """Pseudo-register naming LDS region n (e.g. one pipeline stage of one shared tile) as a memory effect."""
    return Reg(LDS_FILE, n)


def wait_text(vm, lgkm) -> str:
    parts = ([f"vmcnt({vm})"] if vm is not None else []) + ([f"lgkmcnt({lgkm})"] if lgkm is not None else [])
    return " ".join(parts)


class Pending:
    """In-flight ops of one in-order counter.

    Between blocks (the dataflow state): `dist`, unit -> ops issued after the newest op writing it, capped at the
    counter's limit so the lattice is finite. Within a block, tickets: op number t writes its units
    (`ticket[unit] = t`), and ops below `retired` are known complete, so issuing and waiting cost O(1)."""

    __slots__ = ("limit", "ticket", "issued", "retired", "smem", "newest")

    def __init__(self, limit: int, dist=None, outstanding: int = 0, smem: bool = False):
        self.limit = limit
        self.issued = outstanding  # the block's first op gets this ticket; earlier ops have tickets < it
        self.retired = 0
        # a distance capped at the limit becomes the oldest outstanding op: waited for at least as strictly
        self.ticket = {u: max(outstanding - 1 - d, 0) for u, d in (dist or {}).items()} if outstanding else {}
        # the newest ticket of an op that writes units: below `retired`, allowed_for is None for any units, and the
        # pass asks nothing (stores write no units): the 256x256 GEMM's calls 3717 -> 2013 (gfx942), 2084 -> 1640
        self.newest = max(self.ticket.values(), default=-1)
        self.smem = smem  # a scalar load (out of order) may be outstanding

    @property
    def outstanding(self) -> int:
        return min(self.issued - self.retired, self.limit)

    def dist(self) -> dict:
        issued, retired, limit = self.issued, self.retired, self.limit
        return {u: min(issued - t - 1, limit) for u, t in self.ticket.items() if t >= retired}

    def key(self):
        return self.dist(), self.outstanding, self.smem

    def copy(self) -> "Pending":
        return Pending(self.limit, self.dist(), self.outstanding, self.smem)

    def __eq__(self, other):
        return self.key() == other.key()

    def join(self, other: "Pending") -> "Pending":
        dist = self.dist()
        for u, d in other.dist().items():
            dist[u] = min(d, dist.get(u, d))
        return Pending(self.limit, dist, max(self.outstanding, other.outstanding), self.smem or other.smem)

    def allowed_for(self, units) -> int | None:
        """Outstanding ops allowed so that every op writing `units` has completed (None: nothing to wait for).
        A distance past the counter's range waits for the counter's maximum (as LLVM's SIInsertWaitcnts does)."""
        ticket = self.ticket
        newest = -1
        if ticket:
            for u in units:
                t = ticket.get(u, -1)
                if t > newest:
                    newest = t
        if newest < self.retired:  # no op writing them (-1), or all such complete
            return None
        return min(self.issued - newest - 1, self.limit - 1)

    def issue(self, units, smem: bool = False):
        t = self.issued
        self.issued += 1
        ticket = self.ticket
        for u in units:
            ticket[u] = t
        if units:
            self.newest = t
        self.smem = self.smem or smem

    def wait(self, allowed: int):
        self.retired = max(self.retired, self.issued - allowed)
        if allowed == 0:
            self.smem = False


_NO_NEEDS = (isa.COMMENT, isa.WAIT, isa.LABEL, isa.BRANCH)
_NOTHING = (None, 0, (), False)


def _effects(inst: Inst) -> tuple:
    """(units it needs or None, 0: issues nothing / 1: a vm op / 2: an lgkm op, units it writes, is a scalar load).

    Needed: the units whose in-flight writers must complete before `inst`: what it reads, the registers it
    overwrites (not LDS regions: LDS writes are ordered), and, for a barrier, the LDS writes it publishes.
    Written (by a memory op): its defs, and the pseudo-unit of an untagged LDS write or of an LDS read."""
    kind = inst.kind
    if kind in _NO_NEEDS:
        return _NOTHING
    uses, defs = inst.use_units, inst.def_units
    tagged = _names_lds(inst.defs)
    if kind == isa.BARRIER:
        needed = (UNTAGGED_LDS, LDS_READS) + uses
    elif tagged:
        needed = uses + tuple([u for r in inst.defs if r.file != LDS_FILE for u in r.unit_ids])
    else:
        needed = uses + defs
    counter = 1 if kind in _VM_KINDS else 2 if kind in _LGKM_KINDS else 0
    if not counter:
        return needed, 0, (), False
    if kind in _LDS_WRITES and not tagged:
        defs += (UNTAGGED_LDS,)
    elif kind == isa.DS_READ:
        defs += (LDS_READS,)
    return needed, counter, defs, kind in _OUT_OF_ORDER


_REGISTER_ONLY = (isa.SALU, isa.VALU, isa.MFMA, isa.SOPP)  # kinds that issue no counted op and touch no LDS


def _block_effects(insts: list) -> list:
    """_effects of every instruction of a block, those of the register-only kinds (most of a GEMM: its MFMAs,
    address arithmetic and epilogue conversions) made inline rather than by a call each: they need what they read
    and overwrite, and count nothing (only LDS writes name an LDS region in their defs: lds_tag)."""
    register_only = _REGISTER_ONLY
    return [(inst.use_units + inst.def_units, 0, (), False) if inst.kind in register_only else _effects(inst)
            for inst in insts]


def _names_lds(regs: tuple) -> bool:
    """Whether `regs` holds an LDS region (lds_tag) (a loop: a generator for `any` costs more per instruction)."""
    for r in regs:
        if r.file == LDS_FILE:
            return True
    return False


def _transfer(arch):
    effects: dict = {}  # id(block's instruction list) -> its instructions' _effects (a loop block is transferred
    #                     several times; its instructions' register units stay the same)

    def transfer(insts: list, state):
        vm, lgkm = state[0].copy(), state[1].copy()
        out: list = []

        def wait(need_vm, need_lgkm):
            if need_lgkm is not None and lgkm.smem:
                need_lgkm = 0  # scalar loads return out of order: only lgkmcnt(0) is certain
            if need_vm is not None and need_vm >= vm.outstanding:
                need_vm = None
            if need_lgkm is not None and need_lgkm >= lgkm.outstanding:
                need_lgkm = None
            if need_vm is None and need_lgkm is None:
                return
            out.append(Inst("s_waitcnt", (wait_text(need_vm, need_lgkm),), kind=isa.WAIT))
            if need_vm is not None:
                vm.wait(need_vm)
            if need_lgkm is not None:
                lgkm.wait(need_lgkm)

        facts = effects.get(id(insts))
        if facts is None:
            facts = effects[id(insts)] = _block_effects(insts)
        for inst, (needed, counter, written, smem) in zip(insts, facts):
            if needed:  # (a counter with no op writing units in flight needs no look at them)
                need_vm = vm.allowed_for(needed) if vm.newest >= vm.retired else None
                need_lgkm = lgkm.allowed_for(needed) if lgkm.newest >= lgkm.retired else None
                if need_vm is not None or need_lgkm is not None:
                    wait(need_vm, need_lgkm)
            out.append(inst)
            if counter == 1:
                vm.issue(written)
            elif counter == 2:
                lgkm.issue(written, smem=smem)
        return out, (vm, lgkm)

    return transfer


def _join(a, b):
    return b if a is None else (a[0].join(b[0]), a[1].join(b[1]))


def insert_waits(insts: list, arch) -> list:
    entry = (Pending(arch.max_vmcnt), Pending(arch.max_lgkmcnt))
    return cfg.solve(cfg.blocks(insts), entry, _transfer(arch), _join)
