"""`s_setprio` around the MFMA runs of loops that alternate matrix work with vector work (flash attention's KV loop:
QK^T, the softmax, PV), for workgroups that put two or more of their waves on a SIMD.

Why: such a loop has one barrier a step, so the waves of a SIMD leave it together and would run the same phase at
the same time: both their MFMAs, then both their softmaxes with the matrix pipe idle. A raised priority over the
MFMA runs breaks the tie: the SIMD issues the MFMAs of the wave that reached them before the vector work of the
wave still in its softmax, so one wave's softmax runs beside the other's MFMAs (the schedule the 8-wave FAv3
assembly of aiter and HipKittens' attention kernels use; both raise `s_setprio` around their MFMA clusters). The
timing model (perfmodel/cu.py: waves tried in s_setprio order, then oldest first) decides per arch
(`Arch.mixed_loop_mfma_prio`): issue 21's GQA attention at 256 x 64 over 512 threads on MI300X, 428 -> 498
TFLOP/s. A GEMM K loop (no vector work between its MFMA runs) gains nothing and is left alone (amdgcn/schedule.py
says why s_setprio is not emitted there).

What counts: a run starts at an MFMA and lasts until the next VALU instruction that is not an MFMA (LDS reads,
waits, scalar and memory instructions stay in it); `s_setprio level` goes before its first MFMA, `s_setprio 0`
before that VALU instruction. A loop is the instructions from a label to the last branch back to it; a loop whose
body ends inside a run gets `s_setprio 0` after its back branch, so the code after the loop runs at the normal
priority (a branch out of the loop's middle leaves it raised until the next vector instruction).
"""
from __future__ import annotations

from . import isa, isa_table
from .isa import Inst


def raise_mfma_priority(insts: list, level: int) -> list:
    """`insts` with `s_setprio level` / `s_setprio 0` around the MFMA runs of every loop that has MFMAs and other
    VALU work (module docstring)."""
    out = list(insts)
    for start, end in reversed(_mixed_loops(out)):
        out[start:end + 1] = _raised(out[start:end + 1], level)
    return out


def _mixed_loops(insts: list) -> list:
    """(label index, index of the last branch back to it) of each outermost loop whose body holds MFMAs and other
    VALU work, in order."""
    labels = {inst.op: i for i, inst in enumerate(insts) if inst.kind == isa.LABEL}
    ends: dict = {}  # label index -> its last back branch
    for i, inst in enumerate(insts):
        start = labels.get(str(inst.operands[0])) if inst.kind == isa.BRANCH and inst.operands else None
        if start is not None and start < i:
            ends[start] = i
    mixed = [(s, e) for s, e in sorted(ends.items()) if {isa.MFMA, isa.VALU} <= {x.kind for x in insts[s:e]}]
    return [(s, e) for s, e in mixed if not any(s2 < s and e <= e2 for s2, e2 in mixed)]


def _raised(body: list, level: int) -> list:
    out, raised = [], False
    for inst in body:
        if inst.kind == isa.MFMA and not raised:
            out.append(_setprio(level, "MFMAs first while another wave of the SIMD runs vector work"))
            raised = True
        elif inst.kind == isa.VALU and raised:
            out.append(_setprio(0))
            raised = False
        out.append(inst)
    if raised:  # after the back branch: the code after the loop runs at the normal priority
        out.append(_setprio(0))
    return out


def _setprio(level: int, comment: str = "") -> Inst:
    return Inst("s_setprio", (level,), kind=isa_table.lookup("s_setprio", "").kind, comment=comment)
