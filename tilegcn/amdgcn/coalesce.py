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
    not end a value's life (the same reason liveness.py finds lifetime holes only in such kernels); for the same
    reason a DPP or SDWA instruction (row / bank masks, a preserved half) counts as reading what it writes.
"""
from __future__ import annotations

from bisect import bisect_right

from . import cfg
from .isa import MFMA, Inst, Reg


def coalesce_copies(insts: list, vfile) -> list:
    """`insts` with the copies that can be coalesced removed (see the module docstring); `vfile`: the builder's
    virtual VGPR file (regalloc.VirtualFile)."""
    if any(r.file == "exec" for inst in insts for r in inst.defs):
        return insts
    insts = list(insts)
    flow = _Flow(insts)
    barred = {k for inst in insts if inst.kind == MFMA for r in _regs(inst.operands) for k in _indices(r)}
    for pos in range(len(insts)):
        inst = insts[pos]
        if _self_copy(inst):  # (what coalescing two copies of one value leaves of the second)
            flow.drop(pos, inst.operands[0].index)
            insts[pos] = None
            continue
        pair = _copy(inst, vfile, barred)
        if pair is None:
            continue
        d, s = pair
        if flow.written_while_live(pos, d.index, s.index) or flow.written_while_live(pos, s.index, d.index):
            continue
        old, new = (d, s) if _whole(vfile, d) else (s, d)
        insts[pos] = None
        flow.drop(pos, d.index, s.index)
        for at in flow.rename(old.index, new.index):
            insts[at] = _renamed(insts[at], old, new)
    return [inst for inst in insts if inst is not None]


class _Flow:
    """Where each virtual VGPR is read and written (positions in the instruction list, which keeps its length: a
    dropped copy leaves a hole) and the basic blocks, for liveness questions about one register at a time."""

    def __init__(self, insts: list):
        self.blocks = cfg.blocks(insts)
        self.starts, at = [], 0
        for blk in self.blocks:
            self.starts.append(at)
            at += len(blk.insts)
        self.events: dict = {}  # VGPR index -> sorted [(position, reads, writes)]
        for pos, inst in enumerate(insts):
            reads = {k for r in inst.uses for k in _indices(r)}
            writes = {k for r in inst.defs for k in _indices(r)}
            if inst.op.endswith(("_dpp", "_sdwa")):  # may leave lanes / bits of its destination as they were
                reads |= writes
            for k in reads | writes:
                self.events.setdefault(k, []).append((pos, k in reads, k in writes))

    def drop(self, pos: int, *indices: int):
        for k in indices:
            self.events[k] = [e for e in self.events.get(k, []) if e[0] != pos]

    def rename(self, old: int, new: int) -> list:
        """Merge `old`'s accesses into `new`'s; returns the positions that named `old`."""
        moved = self.events.pop(old, [])
        self.events[new] = sorted(self.events.get(new, []) + moved)
        return [e[0] for e in moved]

    def written_while_live(self, copy: int, written: int, live: int) -> bool:
        """Whether an instruction other than the copy at `copy` writes VGPR `written` where VGPR `live` is live."""
        writes = [e[0] for e in self.events.get(written, []) if e[2] and e[0] != copy]
        if not writes:
            return False
        live_in = self._live_in(live)
        return any(self._live_after(p, live, live_in) for p in writes)

    def _block_of(self, pos: int) -> int:
        return bisect_right(self.starts, pos) - 1

    def _live_in(self, index: int) -> list:
        """Per block, whether VGPR `index` is live at its start (backward dataflow to a fixed point: loops)."""
        first = {}  # block -> whether the first access in it reads
        for pos, reads, _ in self.events.get(index, []):
            first.setdefault(self._block_of(pos), reads)
        live_in = [first.get(n, False) for n in range(len(self.blocks))]
        changed = True
        while changed:
            changed = False
            for n in reversed(range(len(self.blocks))):
                if n in first or live_in[n]:
                    continue
                if any(live_in[s] for s in self.blocks[n].succs):
                    live_in[n] = changed = True
        return live_in

    def _live_after(self, pos: int, index: int, live_in: list) -> bool:
        n = self._block_of(pos)
        end = self.starts[n] + len(self.blocks[n].insts)
        for at, reads, _ in self.events.get(index, []):
            if pos < at < end:
                return reads
        return any(live_in[s] for s in self.blocks[n].succs)


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
    if inst is None or inst.op != "v_mov_b32" or inst.suffix or len(inst.operands) != 2:
        return None
    d, s = inst.operands
    if not all(type(x) is Reg and x.file == "v" and x.virtual and x.count == 1 for x in (d, s)) or d is s:
        return None
    if d.index in barred or s.index in barred:
        return None
    if not (_whole(vfile, d) or _whole(vfile, s)):
        return None
    return d, s


def _self_copy(inst) -> bool:
    return inst is not None and inst.op == "v_mov_b32" and not inst.suffix and len(inst.operands) == 2 and \
        type(inst.operands[0]) is Reg and inst.operands[0] is inst.operands[1]


def _whole(vfile, r: Reg) -> bool:
    return vfile.groups[vfile.group_of[r.index]].count == 1


def _renamed(inst: Inst, old: Reg, new: Reg) -> Inst:
    """`inst` with the one-register group `old` named `new` in its operands, defs and uses."""
    return Inst(inst.op, tuple(_swap(o, old, new) for o in inst.operands),
                tuple(new if r is old else r for r in inst.defs), tuple(new if r is old else r for r in inst.uses),
                inst.kind, inst.suffix, inst.comment)


def _swap(o, old: Reg, new: Reg):
    if o is old:
        return new
    if type(o) is not Reg and getattr(o, "reg", None) is old:
        return type(o)(new)
    return o
