"""Machine-level control flow: basic blocks of an instruction list and a forward dataflow solver over them.

The wait-count and hazard passes are forward dataflow problems: the state at an instruction (what memory ops are
in flight and which registers they write; how many wait states ago each MFMA result was produced) depends on every
path that reaches it, the loop back-edge included. `blocks(insts)` splits the list at labels and after branches;
`solve(blocks, entry, transfer, join)` iterates the block entry states to a fixed point, where `transfer` also
rewrites the block (inserting waits or nops) from its entry state, and the final rewrite is what the pass returns.

Termination: the entry state of a block only grows (it is joined with every new predecessor exit state), and the
passes' state lattices are finite (distances and wait-state counters are capped), so the worklist empties.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import isa
from .isa import Inst

UNCONDITIONAL = ("s_branch",)
ENDS = ("s_endpgm",)


@dataclass
class Block:
    label: str | None
    insts: list  # the block's instructions, its label first when it has one
    succs: list = field(default_factory=list)  # indices of successor blocks


def blocks(insts: list) -> list:
    """Basic blocks of `insts` in order (their concatenation is `insts`), successors filled in."""
    cuts = [0]  # where blocks start: the blocks are list slices (these passes see every instruction)
    for pos, inst in enumerate(insts):
        kind = inst.kind
        if kind == isa.LABEL:
            cuts.append(pos)
        elif kind == isa.BRANCH or inst.op in ENDS:
            cuts.append(pos + 1)
    cuts.append(len(insts))
    out: list = []
    for start, end in zip(cuts, cuts[1:]):
        if start < end:
            first = insts[start]
            out.append(Block(first.op if first.kind == isa.LABEL else None, insts[start:end]))
    by_label = {blk.label: i for i, blk in enumerate(out) if blk.label}
    for i, blk in enumerate(out):
        last = blk.insts[-1]
        if last.kind == isa.BRANCH:
            target = str(last.operands[0])
            if target not in by_label:
                raise ValueError(f"branch to unknown label {target}")
            blk.succs.append(by_label[target])
        falls_through = not (last.kind == isa.BRANCH and last.op in UNCONDITIONAL) and last.op not in ENDS
        if falls_through and i + 1 < len(out):
            blk.succs.append(i + 1)
    return out


def solve(blks: list, entry, transfer, join, max_rounds: int = 1000) -> list:
    """Forward dataflow to a fixed point; returns the instruction list rewritten by `transfer`.

    transfer(block_insts, state_in) -> (rewritten insts, state_out) must not modify state_in; join(a, b) ->
    state (a may be None: no path seen yet). States must compare with ==. A block's entry state is replaced
    only when it changes, so the rewrite made from the final entry state is kept, not computed again: blocks
    outside loops are transferred once."""
    if not blks:
        return []
    state_in: list = [None] * len(blks)
    state_in[0] = entry
    rewritten: list = [None] * len(blks)  # (entry state it was made from, rewritten insts)
    work = [0]
    rounds = 0
    while work:
        rounds += 1
        if rounds > max_rounds * len(blks):
            raise RuntimeError("dataflow did not converge")
        i = work.pop(0)
        insts, out = transfer(blks[i].insts, state_in[i])
        rewritten[i] = (state_in[i], insts)
        for s in blks[i].succs:
            new = join(state_in[s], out)
            if state_in[s] is None or new != state_in[s]:
                state_in[s] = new
                if s not in work:
                    work.append(s)
    result: list[Inst] = []
    for blk, st, done in zip(blks, state_in, rewritten):
        if st is None:  # unreachable: keep as is
            result.extend(blk.insts)
        elif done[0] is st:
            result.extend(done[1])
        else:
            result.extend(transfer(blk.insts, st)[0])
    return result
