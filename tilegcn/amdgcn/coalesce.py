"""Register copy coalescing: a `v_mov_b32 D, S` between two virtual VGPRs that never hold different values while
both are needed is dropped, one register named for the other throughout (LLVM's register coalescer, for copies).

Lowering emits such copies where one statement's value lands in another fragment's register: a layout conversion
that is a register move on every thread (flash attention's `scores_scale` into the row layout of `acc_o`), a row
factor copied into the low half of a VGPR pair that `v_pk_mul_f32` reads (`elementwise._scaled_in_pairs`). Each is
a VALU instruction every trip; coalesced, the consumer reads the producer's register.

Input: the lowered instructions over virtual registers (before scheduling and allocation) and the builder's virtual
VGPR file. Output: the same instructions with the coalesced copies gone and the renamed register replaced in every
operand, def and use. A copy is coalesced when:
  - both are single VGPRs of virtual groups, and one of them is a whole group of one register (it is the one renamed:
    the group disappears; the other may sit in a tuple, the VGPR pair a v_pk_mul_f32 reads);
  - neither appears in an MFMA (whose result may not share registers with its sources);
  - they do not interfere: no instruction other than the copy writes one of them while the other is live after it
    (live: read later on some path before being written; loops followed through the CFG's back edges);
  - the kernel never writes EXEC: under a partial EXEC a write keeps the other lanes' old values, so a write does
    not end a value's life (the same reason liveness.py finds lifetime holes only in such kernels).
"""
from __future__ import annotations

from collections import Counter

from . import cfg
from .isa import MFMA, Inst, Reg


def coalesce_copies(insts: list, vfile) -> list:
    """`insts` with the copies that can be coalesced removed (see the module docstring); `vfile`: the builder's
    virtual VGPR file (regalloc.VirtualFile)."""
    if any(r.file == "exec" for inst in insts for r in inst.defs):
        return insts
    barred = {k for inst in insts if inst.kind == MFMA for r in _regs(inst.operands) for k in _indices(r)}
    pos = 0
    while pos < len(insts):
        if _self_copy(insts[pos]):  # (what coalescing two copies of one value leaves of the second)
            insts = insts[:pos] + insts[pos + 1:]
            continue
        pair = _copy(insts[pos], vfile, barred)
        if pair is not None and not _interfere(insts, pos, *pair):
            insts = _renamed(insts, pos, *pair, vfile)
            continue  # (the copy at pos is gone: the next instruction is there now)
        pos += 1
    return insts


def _regs(operands):
    for o in operands:
        if type(o) is Reg:
            yield o
        elif isinstance(getattr(o, "reg", None), Reg):
            yield o.reg


def _indices(r: Reg) -> range:
    return range(r.index, r.index + r.count) if r.file == "v" and r.virtual else range(0)


def _copy(inst: Inst, vfile, barred: set):
    """(D, S) of a plain `v_mov_b32 D, S` between single virtual VGPRs neither of which is barred, one of them a whole
    one-register group; else None."""
    if inst.op != "v_mov_b32" or inst.suffix or len(inst.operands) != 2:
        return None
    d, s = inst.operands
    if not all(type(x) is Reg and x.file == "v" and x.virtual and x.count == 1 for x in (d, s)) or d is s:
        return None
    if d.index in barred or s.index in barred:
        return None
    if not (_whole(vfile, d) or _whole(vfile, s)):
        return None
    return d, s


def _self_copy(inst: Inst) -> bool:
    return inst.op == "v_mov_b32" and not inst.suffix and len(inst.operands) == 2 and \
        type(inst.operands[0]) is Reg and inst.operands[0] is inst.operands[1]


def _whole(vfile, r: Reg) -> bool:
    return vfile.groups[vfile.group_of[r.index]].count == 1


def _interfere(insts: list, copy: int, d: Reg, s: Reg) -> bool:
    """Whether some instruction other than the copy writes d while s is live after it, or s while d is."""
    return _written_while_live(insts, copy, d.index, s.index) or _written_while_live(insts, copy, s.index, d.index)


def _written_while_live(insts: list, copy: int, written: int, live: int) -> bool:
    """Whether an instruction other than insts[copy] writes VGPR `written` at a point where VGPR `live` is live."""
    after = _live_after(insts, live)
    return any(pos != copy and after[pos] and any(written in _indices(r) for r in inst.defs)
               for pos, inst in enumerate(insts))


def _live_after(insts: list, index: int) -> list:
    """For each instruction, whether VGPR `index` is live just after it (read on some path from there before any
    write), by backward dataflow over the basic blocks, loops included."""
    blks = cfg.blocks(insts)
    starts, at = [], 0
    for blk in blks:
        starts.append(at)
        at += len(blk.insts)
    live_in = [False] * len(blks)
    changed = True
    while changed:
        changed = False
        for n in reversed(range(len(blks))):
            live = any(live_in[s] for s in blks[n].succs)
            for inst in reversed(blks[n].insts):
                live = _step(inst, index, live)
            if live != live_in[n]:
                live_in[n], changed = live, True
    out = [False] * len(insts)
    for n, blk in enumerate(blks):
        live = any(live_in[s] for s in blk.succs)
        for k in reversed(range(len(blk.insts))):
            out[starts[n] + k] = live
            live = _step(blk.insts[k], index, live)
    return out


def _step(inst: Inst, index: int, live_after: bool) -> bool:
    """Liveness of VGPR `index` just before `inst`, from just after it."""
    if any(index in _indices(r) for r in inst.uses):
        return True
    if any(index in _indices(r) for r in inst.defs):
        return False
    return live_after


def _renamed(insts: list, copy: int, d: Reg, s: Reg, vfile) -> list:
    """insts without the copy, the one-register group (d's where whole, else s's) named by the other register."""
    old, new = (d, s) if _whole(vfile, d) else (s, d)
    out = []
    for pos, inst in enumerate(insts):
        if pos == copy:
            continue
        if old in inst.defs or old in inst.uses or any(r is old for r in _regs(inst.operands)):
            inst = Inst(inst.op, tuple(_swap(o, old, new) for o in inst.operands),
                        tuple(new if r is old else r for r in inst.defs), tuple(new if r is old else r for r in inst.uses),
                        inst.kind, inst.suffix, inst.comment)
        out.append(inst)
    return out


def _swap(o, old: Reg, new: Reg):
    if o is old:
        return new
    if type(o) is not Reg and getattr(o, "reg", None) is old:
        return type(o)(new)
    return o
