"""Live ranges of virtual register groups over a lowered instruction list, loops included.

A group (one `VirtualFile.alloc`: a 4-VGPR staging tuple, an accumulator range, an address temporary) is live
from its first def to its last use, as one interval of instruction positions: a group written piecewise (four
loads into one tuple, MFMAs into slices of the accumulators) is not ended early by the partial defs. Loops are
where the linear order lies: a loop is a label and a later branch back to it (the lowering emits structured
loops, `s_cbranch_* head` at the end of the body), and a group is live across the whole loop, back-edge
included, when it is

  - live into the loop: it appears before the head and again inside the loop (defined in the preheader, read in
    the body), or
  - carried by the loop: some of its registers are read inside the loop before anything in the loop wrote them
    (the value of the previous iteration, or of the preheader on the first trip).

A group defined and dead within one trip keeps its short interval, so it can share registers with values that
are live around the loop. Forward branches need nothing: every path to an instruction only passes earlier
positions, so the interval [first def, last use] already covers it. Loops nest: inner loops are widened first,
then the loops that contain them.

Input: instructions whose defs/uses name every register they write/read (virtual or physical). Output:
`Lives.first[g]`, `Lives.last[g]` per group number (-1: the group appears nowhere) and `Lives.floor`, the
physical registers per file the instructions name directly (ABI registers: the work-item id, kernarg pointer,
workgroup ids), which no group may take.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import isa


@dataclass
class Lives:
    first: list
    last: list
    floor: dict  # file -> physical registers [0, floor) named directly by the instructions


def loops(insts: list) -> list:
    """(head position, back-branch position) of every loop, innermost (shortest) first."""
    labels, found = {}, []
    for pos, kind in enumerate([inst.kind for inst in insts]):
        if kind == isa.LABEL:
            labels[insts[pos].op] = pos
        elif kind == isa.BRANCH and insts[pos].operands:
            head = labels.get(str(insts[pos].operands[0]))  # a label seen before: a branch back
            if head is not None:
                found.append((head, pos))
    return sorted(found, key=lambda loop: loop[1] - loop[0])


def live_ranges(insts: list, files: dict, groups: list) -> Lives:
    """Intervals of `groups` (regalloc.Group by number) of `files` (file name -> VirtualFile) in `insts`; see the
    module doc."""
    n_groups = len(groups)
    first, last = [-1] * n_groups, [-1] * n_groups
    place, floor = _group_bits(insts, files, groups)
    group = {r: at[0] for r, at in place.items() if at is not None}  # virtual Reg -> its group number
    group_of = group.get
    for pos, inst in enumerate(insts):
        for r in inst.uses + inst.defs:
            g = group_of(r)
            if g is not None:
                if first[g] < 0:
                    first[g] = pos
                last[g] = pos
    starts = list(first)  # before the loops widen them
    for head, end in loops(insts):
        carried = _carried(insts, head, end, place, starts)
        for g in range(n_groups):
            if first[g] < 0 or first[g] > end or last[g] < head:
                continue
            if first[g] < head or g in carried:
                first[g] = min(first[g], head)
                last[g] = max(last[g], end)
    return Lives(first, last, floor)


def _carried(insts: list, head: int, end: int, place: dict, starts: list) -> set:
    """The groups first named inside the loop insts[head:end + 1] some of whose registers the loop reads before it
    writes them (the previous iteration's value; a group named before the loop is live into it anyway). Nothing
    before `head` names these groups, so following the loop body alone in linear order finds those reads."""
    defined: dict = {}  # group -> mask of its registers the loop body has written so far
    carried = set()
    for inst in insts[head:end + 1]:
        for r in inst.uses:
            at = place[r]
            if at is not None and starts[at[0]] >= head and at[1] & ~defined.get(at[0], 0):
                carried.add(at[0])
        for r in inst.defs:
            at = place[r]
            if at is not None:
                defined[at[0]] = defined.get(at[0], 0) | at[1]
    return carried


def _group_bits(insts: list, files: dict, groups: list) -> tuple:
    """({Reg: (group number, mask of the group's registers it names) or None for a physical register}, for every
    distinct def and use of `insts`; the physical registers per file named directly). Computed once per distinct
    register (a few per instruction), so the loop over the def and use slots is a plain dict lookup."""
    floor = dict.fromkeys(files, 0)
    place = {}
    for r in set().union(*[inst.defs for inst in insts], *[inst.uses for inst in insts]):
        if r.virtual:
            g = files[r.file].group_of[r.index]
            place[r] = (g, ((1 << r.count) - 1) << (r.index - groups[g].base))
        else:
            place[r] = None
            if r.file in floor and r.index + r.count > floor[r.file]:
                floor[r.file] = r.index + r.count
    return place, floor
