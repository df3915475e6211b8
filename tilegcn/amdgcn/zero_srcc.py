"""Zeroed VGPR accumulators folded into the MFMA that first accumulates into them.

Input: lowered instructions on virtual registers, before scheduling. An accumulator in VGPRs (passes/layout.py
`vector_accumulators`) that a statement sets to zero right before its gemm (T.clear, or flash attention's key-bound
mask once it folds to 0 for every key) is written with one `v_mov_b32 v, 0` per register; the gemm's first MFMA
then reads those zeros as srcC. Output: that MFMA takes the inline constant 0 as srcC (the ISA broadcasts it to
every C element, as the AGPR fill of passes/elementwise.py uses: D = A*B + 0) and the moves go: 32 VALU
instructions a KV step for a 128 x 64 fp32 score tile over 256 threads. Only moves whose register nothing reads
(nor writes) before that MFMA fold, within straight-line code (labels and branches end the search), and none made
under a lane mask (EXEC written: the MFMA would also zero the switched-off lanes).
"""
from __future__ import annotations

import math

from . import isa
from .isa import EXEC, Inst


def fold_zeroed_accumulators(insts: list) -> list:
    """`insts` with each foldable zeroing of an MFMA's srcC (the module docstring) folded into the MFMA."""
    zeroed: dict = {}  # register unit -> index of the `v_mov_b32 unit, 0` that last wrote it, unread since
    dropped, out = set(), list(insts)
    masked = False  # inside an EXEC-masked region (s_and_saveexec ... s_mov_b64 exec)
    for n, inst in enumerate(insts):
        if inst.kind in (isa.LABEL, isa.BRANCH):
            zeroed.clear()
            continue
        if inst.kind == isa.MFMA and _accumulates_in_vgprs(inst):
            units = inst.operands[3].units()
            if all(u in zeroed for u in units):
                dropped.update(zeroed.pop(u) for u in units)
                out[n] = Inst(inst.op, inst.operands[:3] + (0,), inst.defs, inst.uses[:2], inst.kind, inst.suffix,
                              inst.comment)
                continue
        for reg in (*inst.uses, *inst.defs):
            for u in reg.units():
                zeroed.pop(u, None)
        if EXEC in inst.defs:
            zeroed.clear()
            masked = not inst.op.startswith("s_mov_b64")  # a restore ends the mask, saveexec / v_cmpx start one
        elif _zeroes_vgpr(inst) and not masked:
            zeroed[inst.defs[0].units()[0]] = n
    return [x for n, x in enumerate(out) if n not in dropped]


def _accumulates_in_vgprs(inst: Inst) -> bool:
    """D, A, B, C = operands with C the same VGPR tuple as D (the gemm's accumulating MFMAs)."""
    ops = inst.operands
    return len(ops) == 4 and isinstance(ops[3], isa.Reg) and ops[3] == ops[0] and ops[3].file == "v"


def _zeroes_vgpr(inst: Inst) -> bool:
    if inst.op != "v_mov_b32" or len(inst.defs) != 1 or inst.defs[0].file != "v" or inst.defs[0].count != 1:
        return False
    value = inst.operands[1]
    return isinstance(value, (int, float)) and value == 0 and math.copysign(1.0, value) > 0
