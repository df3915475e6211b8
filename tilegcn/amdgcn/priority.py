"""`s_setprio` around the MFMAs that a loop step's vector work waits for (flash attention's KV loop: QK^T, whose
scores the softmax reads), for workgroups that put two or more of their waves on a SIMD.

Why: such a loop has one barrier a step, so the waves of a SIMD leave it together and would run the same phase at
the same time: both their MFMAs, then both their softmaxes with the matrix pipe idle. A raised priority over the
MFMAs on the step's critical path (those whose results the step's vector work reads) breaks the tie: the SIMD issues
them for the wave that reached them before the work of the wave past them (its softmax, its PV MFMAs), so one
wave's QK^T runs beside the other's softmax and PV (the schedule the 8-wave FAv3 assembly of aiter and HipKittens'
attention kernels use; both raise `s_setprio` around an MFMA cluster). The timing model (perfmodel/cu.py: waves
tried in s_setprio order, then oldest first) decides per arch (`Arch.mixed_loop_mfma_prio`). Issue 21's GQA
attention at 256 x 64 over 512 threads (bench/attention_loop.py, every trip simulated): MI355X 1,288 TFLOP/s with
no s_setprio, 1,270 with it around every run of MFMAs (the rule before: each MFMA between the rescale's v_mul_f32s
is a run of its own, 64 s_setprio a step), 1,312 with this rule; MI300X 468 with none, 574 around every run, 578
with this rule. A GEMM K loop (no vector work between its MFMA runs) gains nothing and is left alone
(amdgcn/schedule.py says why s_setprio is not emitted there).

What counts, per barrier segment of a loop body (the instructions between two `s_barrier`s, or a barrier and the
body's ends): the MFMAs whose results a later VALU instruction of the segment reads, directly or through the MFMAs
that accumulate onto them. `s_setprio level` goes before the first of them and `s_setprio 0` after the last
(everything between issues raised, vector work included), or before a branch between them, so no branch leaves the
loop at a raised priority. A loop is the instructions from a label to the last branch back to it.
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
    """`body` (a loop from its label to its back branch) with each barrier segment's MFMAs that its vector work
    waits for raised to `level` (module docstring)."""
    out: list = []
    segment: list = []
    for inst in body:
        segment.append(inst)
        if inst.kind == isa.BARRIER:
            out += _raised_segment(segment, level)
            segment = []
    return out + _raised_segment(segment, level)


def _raised_segment(segment: list, level: int) -> list:
    feeding = _feeding_mfmas(segment)
    if not feeding:
        return list(segment)
    first, last = feeding[0], feeding[-1]
    branch = next((i for i in range(first, last) if segment[i].kind == isa.BRANCH), None)
    if branch is not None:  # (not seen in the loops this pass raises: no exit at a raised priority)
        last = branch - 1
    return (segment[:first] + [_setprio(level, "the MFMAs this step's vector work waits for go first")]
            + segment[first:last + 1] + [_setprio(0)] + segment[last + 1:])


def _feeding_mfmas(segment: list) -> list:
    """Indices, in order, of the MFMAs of `segment` whose results a later VALU instruction of it reads, directly or
    through the MFMAs accumulating onto them (QK^T's k steps into a score block the row max reads)."""
    units = lambda regs: {u for r in regs for u in r.unit_ids}  # noqa: E731
    needed: set = set()  # register units a later VALU instruction reads, as the walk back stands
    feeding = []
    for i in range(len(segment) - 1, -1, -1):
        inst = segment[i]
        written = units(inst.defs)
        if inst.kind == isa.MFMA and written & needed:
            feeding.append(i)
            needed = (needed - written) | units(inst.uses)
            continue
        needed -= written
        if inst.kind == isa.VALU:
            needed |= units(inst.uses)
    return feeding[::-1]


def _setprio(level: int, comment: str = "") -> Inst:
    return Inst("s_setprio", (level,), kind=isa_table.lookup("s_setprio", "").kind, comment=comment)
