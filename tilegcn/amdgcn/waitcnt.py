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


def _units(regs) -> set:
    out = set()
    for r in regs:
        out.update(r.units())
    return out


def _allowed_after(queue, predicate):
    """How many ops may stay outstanding so that every op matching `predicate` has completed."""
    allowed = None
    for position, entry in enumerate(queue):
        if predicate(entry):
            allowed = len(queue) - position - 1
    return allowed


def _min(a, b):
    return b if a is None else a if b is None else min(a, b)


def wait_text(vm, lgkm) -> str:
    parts = ([f"vmcnt({vm})"] if vm is not None else []) + ([f"lgkmcnt({lgkm})"] if lgkm is not None else [])
    return " ".join(parts)


def insert_waits(insts: list, arch) -> list:
    out: list = []
    vm: list = []  # (kind, units) in issue order
    lgkm: list = []

    def wait(need_vm, need_lgkm):
        nonlocal vm, lgkm
        if need_lgkm is not None and any(kind == isa.SMEM for kind, _ in lgkm):
            need_lgkm = 0  # scalar loads return out of order
        if need_vm is not None and need_vm >= len(vm):
            need_vm = None
        if need_lgkm is not None and need_lgkm >= len(lgkm):
            need_lgkm = None
        if need_vm is None and need_lgkm is None:
            return
        out.append(Inst("s_waitcnt", (wait_text(need_vm, need_lgkm),), kind=isa.WAIT))
        if need_vm is not None:
            vm = vm[len(vm) - need_vm:] if need_vm else []
        if need_lgkm is not None:
            lgkm = lgkm[len(lgkm) - need_lgkm:] if need_lgkm else []

    for inst in insts:
        if inst.kind in (isa.LABEL, isa.BRANCH):
            wait(0, 0)
        elif inst.kind == isa.BARRIER:
            wait(_allowed_after(vm, lambda e: e[0] == isa.LDS_DMA),
                 _allowed_after(lgkm, lambda e: e[0] == isa.DS_WRITE))
        elif inst.kind not in (isa.COMMENT, isa.WAIT):
            touched = _units(inst.uses) | _units(inst.defs)
            need_vm = _allowed_after(vm, lambda e: e[1] & touched)
            need_lgkm = _allowed_after(lgkm, lambda e: e[1] & touched)
            if inst.kind in _VM_KINDS and len(vm) >= arch.max_vmcnt:
                need_vm = _min(need_vm, arch.max_vmcnt - 1)
            if inst.kind in _LGKM_KINDS and len(lgkm) >= arch.max_lgkmcnt:
                need_lgkm = _min(need_lgkm, arch.max_lgkmcnt - 1)
            wait(need_vm, need_lgkm)
        out.append(inst)
        if inst.kind in _VM_KINDS:
            vm.append((inst.kind, _units(inst.defs)))
        elif inst.kind in _LGKM_KINDS:
            lgkm.append((inst.kind, _units(inst.defs)))
    return out
