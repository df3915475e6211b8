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

Lifetime holes (`live_ranges(..., holes=True)`): a group widened to a whole loop may still be dead inside it, between
its last read and a rewrite of all its registers. A pipelined K loop unrolled over two stages is the case that
matters: each stage's staging VGPRs are written in one half of the body and read (copied to LDS) at the top of the
next trip, so both are live around the loop, yet between the copy to LDS and the next load into them they hold
nothing. `Lives.holes[g]` lists such spans (first, last position, inclusive) where the group's registers are free for
groups that live entirely inside the span (regalloc._scan). A span is one only if every register of the group is
written before it is read on every path from it: from the span on to the rewrite the code is straight (no branch),
the rewrite writes each register before any read of it, and it writes every lane (the kernel never writes EXEC).

Input: instructions whose defs/uses name every register they write/read (virtual or physical). Output:
`Lives.first[g]`, `Lives.last[g]` per group number (-1: the group appears nowhere), `Lives.holes` (empty unless
asked for) and `Lives.floor`, the physical registers per file the instructions name directly (ABI registers: the
work-item id, kernarg pointer, workgroup ids), which no group may take.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import isa


@dataclass
class Lives:
    first: list
    last: list
    floor: dict  # file -> physical registers [0, floor) named directly by the instructions
    holes: dict = field(default_factory=dict)  # group -> [(first, last) position where it is dead], inside its life


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


def live_ranges(insts: list, files: dict, groups: list, holes: bool = False) -> Lives:
    """Intervals of `groups` (regalloc.Group by number) of `files` (file name -> VirtualFile) in `insts`, with the
    lifetime holes of the groups widened to a loop when `holes`; see the module doc."""
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
    widened: dict = {}  # group -> the loops that widened it
    for head, end in loops(insts):
        carried = _carried(insts, head, end, place, starts)
        for g in range(n_groups):
            if first[g] < 0 or first[g] > end or last[g] < head:
                continue
            if first[g] < head or g in carried:
                first[g] = min(first[g], head)
                last[g] = max(last[g], end)
                widened.setdefault(g, []).append((head, end))
    found = _holes(insts, widened, place, groups) if holes and widened and not _writes_exec(insts) else {}
    return Lives(first, last, floor, found)


def _writes_exec(insts: list) -> bool:
    """Whether any instruction writes EXEC. A write under a partial EXEC leaves the other lanes' old values, which
    a later read with those lanes on may still need, so a rewrite only kills a group where every vector instruction
    runs with the kernel's one EXEC: holes are found only in such kernels (the GEMMs they are for set no EXEC)."""
    return any(r.file == "exec" for inst in insts for r in inst.defs)


def _holes(insts: list, widened: dict, place: dict, groups: list) -> dict:
    """{group: [(first, last) dead position]} for the groups in `widened` (group -> loops (head, end) that widened
    it): the gaps between two of its accesses inside such a loop where the later access starts a rewrite of all of
    its registers (module doc). Gaps are found from the group's accesses in the loop body, in order."""
    accesses: dict = {g: [] for g in widened}  # group -> [(position, mask read, mask written)]
    spans = sorted({loop for loops_ in widened.values() for loop in loops_})
    for head, end in spans:
        for pos in range(head, end + 1):
            inst = insts[pos]
            for regs, is_def in ((inst.uses, False), (inst.defs, True)):
                for r in regs:
                    at = place[r]
                    if at is not None and at[0] in accesses:
                        accesses[at[0]].append((pos, 0 if is_def else at[1], at[1] if is_def else 0))
    branches = [pos for pos, inst in enumerate(insts) if inst.kind == isa.BRANCH]
    out: dict = {}
    for g, loops_ in widened.items():
        for head, end in loops_:
            events = _merged(a for a in accesses[g] if head <= a[0] <= end)
            full = (1 << groups[g].count) - 1
            for i in range(1, len(events)):
                done = _rewritten(events, i, full)
                if done is None or events[i][0] - events[i - 1][0] < 2:
                    continue
                gap = (events[i - 1][0] + 1, events[i][0] - 1)
                if not any(gap[0] <= p <= events[done][0] for p in branches):
                    out.setdefault(g, []).append(gap)
    return {g: _union(spans) for g, spans in out.items()}


def _union(spans: list) -> list:
    """Sorted disjoint spans covering `spans` (nested loops may find overlapping ones)."""
    out: list = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _merged(accesses) -> list:
    """[(position, mask read, mask written)] with one entry per position (an instruction may name a group twice)."""
    out: list = []
    for pos, read, written in sorted(accesses):
        if out and out[-1][0] == pos:
            out[-1] = (pos, out[-1][1] | read, out[-1][2] | written)
        else:
            out.append((pos, read, written))
    return out


def _rewritten(events: list, i: int, full: int):
    """The index of the event at which events[i:] have written every register of `full` before reading any register
    they have not written yet, or None (a read of an old value comes first, or the accesses end)."""
    written = 0
    for j in range(i, len(events)):
        _, read, wrote = events[j]
        if read & ~written:
            return None
        written |= wrote
        if written & full == full:
            return j
    return None


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
