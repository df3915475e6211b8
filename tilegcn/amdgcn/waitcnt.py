"""Wait-count insertion: a `s_waitcnt` right before the first instruction that needs a result.

Input: a straight list of instructions with defs/uses/kinds and no waits. Output: the same list with
`s_waitcnt vmcnt(N) lgkmcnt(M)` inserted where a register produced by an in-flight memory op is read
or overwritten (ticket scheme: the producer is the K-th of T outstanding ops -> vmcnt(T-K-1)).
Vector memory and LDS ops complete in order; scalar loads do not, so any outstanding s_load forces
lgkmcnt(0). Before `s_barrier` every LDS write (ds_write: lgkmcnt; LDS DMA: vmcnt) is waited for, since
the barrier is what publishes LDS data to the other waves and does not wait by itself. Labels and
branches flush every counter (the pass does not follow control flow).
"""
from __future__ import annotations

from . import isa
from .isa import Inst

_VM_KINDS = (isa.VMEM_LOAD, isa.VMEM_STORE, isa.LDS_DMA)
_LGKM_KINDS = (isa.DS_READ, isa.DS_WRITE, isa.SMEM)


def wait_text(vm, lgkm) -> str:
    parts = ([f"vmcnt({vm})"] if vm is not None else []) + ([f"lgkmcnt({lgkm})"] if lgkm is not None else [])
    return " ".join(parts)


class Counter:
    """One in-order counter (vmcnt or lgkmcnt) as tickets: op number t is outstanding while t >= retired."""

    def __init__(self, limit: int):
        self.limit = limit
        self.issued = 0
        self.retired = 0
        self.owner: dict = {}  # register unit -> ticket of the last op writing it
        self.last_of_kind: dict = {}  # kind -> ticket of the last op of that kind
        self.smem_pending = 0  # ticket bound below which scalar loads may still be in flight

    @property
    def outstanding(self) -> int:
        return self.issued - self.retired

    def allowed_after(self, ticket) -> int | None:
        """Outstanding ops allowed so that op `ticket` has completed (None: nothing to wait for)."""
        if ticket is None or ticket < self.retired:
            return None
        return self.issued - ticket - 1

    def newest_writer(self, units) -> int | None:
        owner = self.owner
        tickets = [owner[u] for u in units if u in owner]
        return max(tickets) if tickets else None

    def issue(self, kind: str, units):
        ticket = self.issued
        self.issued += 1
        for u in units:
            self.owner[u] = ticket
        self.last_of_kind[kind] = ticket
        if kind == isa.SMEM:
            self.smem_pending = self.issued

    def wait(self, allowed: int):
        self.retired = max(self.retired, self.issued - allowed)


def _units(regs) -> list:
    out = []
    for r in regs:
        out.extend(r.units())
    return out


def _min(a, b):
    return b if a is None else a if b is None else min(a, b)


def insert_waits(insts: list, arch) -> list:
    out: list = []
    vm, lgkm = Counter(arch.max_vmcnt), Counter(arch.max_lgkmcnt)

    def wait(need_vm, need_lgkm):
        if need_lgkm is not None and lgkm.smem_pending > lgkm.retired:
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

    for inst in insts:
        kind = inst.kind
        if kind in (isa.LABEL, isa.BRANCH):
            wait(0, 0)
        elif kind == isa.BARRIER:
            wait(vm.allowed_after(vm.last_of_kind.get(isa.LDS_DMA)),
                 lgkm.allowed_after(lgkm.last_of_kind.get(isa.DS_WRITE)))
        elif kind not in (isa.COMMENT, isa.WAIT):
            touched = _units(inst.uses) + _units(inst.defs)
            need_vm = vm.allowed_after(vm.newest_writer(touched))
            need_lgkm = lgkm.allowed_after(lgkm.newest_writer(touched))
            if kind in _VM_KINDS and vm.outstanding >= vm.limit:
                need_vm = _min(need_vm, vm.limit - 1)
            if kind in _LGKM_KINDS and lgkm.outstanding >= lgkm.limit:
                need_lgkm = _min(need_lgkm, lgkm.limit - 1)
            wait(need_vm, need_lgkm)
        out.append(inst)
        if kind in _VM_KINDS:
            vm.issue(kind, _units(inst.defs))
        elif kind in _LGKM_KINDS:
            lgkm.issue(kind, _units(inst.defs))
    return out
