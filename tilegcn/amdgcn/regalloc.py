"""Virtual registers during lowering, and the register allocation pass that places them.

Lowering asks `b.v / b.s / b.a` (`VirtualFile`s) for register groups and gets *virtual* registers: a group is a
contiguous range of the file's virtual numbering (slices of it stay in it), with the alignment it asked for and
a name for error messages. Nothing is freed by hand: `free` is a no-op kept for the call sites, because a value's
life is read from the instructions (liveness.py), so emission order no longer fixes which values may share a
register, and a scheduler may reorder instructions before allocation.

`allocate(insts, b, threads)` (the pass, after lowering and scheduling, before wait counts and hazard nops):
  input   instructions whose defs/uses name every register they touch; virtual groups of b.v, b.s, b.a, and
          physical ABI registers (work-item id, kernarg pointer, workgroup ids, VCC/EXEC/M0/SCC) named directly
  output  the same instructions over physical registers only, and the register counts of the kernel descriptor
          (the allocation's peaks per file, the ABI registers included)
Linear scan per file over the live intervals (liveness.live_ranges): groups in order of their first position
take the lowest free run of registers at their alignment (at least the ISA's tuple alignment, arch.py), and
return it after their last position. Intervals are closed: a group that starts at an instruction never takes
the registers of one that ends there (an MFMA's result may not overlap its sources). A kernel whose peak
exceeds the arch's register file is a ResourceError (needed vs available, and the values live at the peak);
nothing ever spills. `allocate(..., holes=True)` also uses the lifetime holes of groups that live around a loop
(liveness.py): a group that starts and ends inside another's hole may take its registers (`_HoleEvents`); the
compiler asks for that only when whole intervals do not fit (docs/internals.md, the 8-wave gfx942 tile).
"""
from __future__ import annotations

import heapq
import operator
from collections import Counter
from itertools import accumulate, chain
from typing import NamedTuple

from ..errors import InternalError, ResourceError
from .isa import Inst, Reg, regs_of, unit_ids_of
from .liveness import live_ranges


class Group(NamedTuple):
    """A virtual register group (a NamedTuple: built in C, ~0.8 us against ~2.8 us for a frozen dataclass, and a
    GEMM's lowering makes 800-1300 of them)."""

    base: int  # first index in the file's virtual numbering
    count: int
    align: int
    what: str


class VirtualFile:
    """The virtual registers of one register file ("v", "s", "a"); groups are numbered across the files that
    share `groups`."""

    def __init__(self, file: str, groups: list):
        self.file = file
        self.groups = groups  # shared by the kernel's files: group number -> Group
        self.group_of: list = []  # virtual index -> group number
        self.numbers: list = []  # this file's group numbers, in allocation order
        self.reserved = 0  # physical registers [0, reserved) hold ABI values: no group takes them

    def reserve(self, count: int):
        """Keep the first `count` physical registers out of the allocation (registers the descriptor sets up)."""
        self.reserved = max(self.reserved, count)

    def alloc(self, count: int = 1, align: int = 1, what: str = "") -> Reg:
        """A new virtual group of `count` registers, placed at a multiple of `align` by `allocate`."""
        number, base = len(self.groups), len(self.group_of)
        self.groups.append(Group(base, count, align, what))
        self.numbers.append(number)
        self.group_of.extend([number] * count)
        return Reg(self.file, base, count, virtual=True)

    def free(self, reg: Reg):
        """Nothing to do: a group's life ends at its last use in the instructions."""


def allocate(insts: list, b, threads: int | None = None, holes: bool = False) -> tuple:
    """(instructions over physical registers, register counts) for the virtual groups of builder `b`. With
    `threads`, the counts are checked against a workgroup of that many threads (check_workgroup_fits) before the
    operands are rewritten: an order that does not fit costs its liveness and scan only (the rewrite is the larger
    part), so trying the interleaved order first and falling back to the emitted one stays cheap. With `holes`, the
    groups that live around a loop lend their registers where they are dead inside it (liveness.py's lifetime
    holes; the compiler asks for them only when the plain intervals do not fit)."""
    files = {"v": b.v, "s": b.s, "a": b.a}
    groups = b.v.groups
    lives = live_ranges(insts, files, groups, holes=holes)
    placed = [-1] * len(groups)  # first physical register of each group; -1: in no def or use
    peaks = {}
    for file, vf in files.items():
        peaks[file] = _scan(file, vf, lives, placed, b.arch)
    counts = register_counts(b.arch, peaks["v"], peaks["a"], peaks["s"])
    if threads is not None:
        check_workgroup_fits(b.arch, counts, threads)
    return _rewrite(insts, files, placed), counts


def _scan(file: str, vf: VirtualFile, lives, placed: list, arch) -> int:
    """Linear scan of one file: fills placed[g] with each live group's first physical register; returns the
    file's peak (registers [0, peak) used). Raises ResourceError past the arch's file."""
    groups, first, last = vf.groups, lives.first, lives.last
    floor = max(lives.floor[file], vf.reserved)
    used = bytearray(b"\x01" * floor)  # 1 = taken
    peak, at_peak, available = floor, [], _available(arch, file)
    order = sorted((first[g], g) for g in vf.numbers if first[g] >= 0)
    active: list = []  # heap of (last position, group number)
    holes = _HoleEvents(lives.holes, vf.numbers, groups, placed, used)
    for start, g in order:
        while active and active[0][0] < start:
            done = heapq.heappop(active)[1]
            at = placed[done]
            used[at:at + groups[done].count] = bytes(groups[done].count)
        grp = groups[g]
        count = grp.count
        blocked = holes.advance(start, last[g]) if holes.events else ()
        if count == 1 and grp.align == 1:  # most values: the lowest free register
            at = used.find(0)
            if at < 0:
                at = len(used)
                used.append(1)
            else:
                used[at] = 1
        else:
            at = _lowest_free(used, count, max(grp.align, arch.register_alignment(file, count)))
            used[at:at + count] = b"\x01" * count
        placed[g] = at
        for r in blocked:  # registers of holes that close before this group ends: barred for its search only
            used[r] = 0
        heapq.heappush(active, (last[g], g))
        if at + count > peak:
            peak = at + count
            if peak > available:  # what to name in the ResourceError
                at_peak = [groups[x] for _, x in active]
    check_budget(arch, file, peak, at_peak)
    return peak


class _HoleEvents:
    """The lifetime holes of one file's groups (liveness.Lives.holes) as the scan meets them. At a hole's first
    position its group's registers become free (`used` cleared); at the position after its last they are taken
    again. A group may take them only if it ends inside the hole: `advance` marks the free registers of every open
    hole that closes before the group being placed ends as taken and returns them (the scan clears them again once
    the group is placed)."""

    def __init__(self, holes: dict, numbers: list, groups: list, placed: list, used: bytearray):
        mine = set(numbers)
        # (position, 1 opens / 0 closes, group, where the hole closes): closes sort before opens at one position
        self.events = sorted((pos, kind, g, last + 1) for g, spans in holes.items() if g in mine
                             for first, last in spans for pos, kind in ((first, 1), (last + 1, 0)))
        self.groups, self.placed, self.used = groups, placed, used
        self.open: dict = {}  # group -> the position at which its open hole closes
        self.next = 0

    def advance(self, start: int, end: int) -> list:
        """Open and close the holes up to `start`; the registers barred to a group placed at `start`, live to
        `end`."""
        used, events = self.used, self.events
        while self.next < len(events) and events[self.next][0] <= start:
            _, opens, g, closes = events[self.next]
            self.next += 1
            at, count = self.placed[g], self.groups[g].count
            if at < 0:  # (a hole lies inside its group's life: the group is placed before it opens)
                continue
            if opens:
                used[at:at + count] = bytes(count)
                self.open[g] = closes
            elif self.open.pop(g, None) is not None:
                if any(used[at:at + count]):  # advance bars every group that would outlive the hole
                    raise InternalError(f"register allocation: a group outlived the lifetime hole of "
                                        f"{self.groups[g].what or 'a group'} it took registers from")
                used[at:at + count] = b"\x01" * count
        barred = []
        for g, closes in self.open.items():
            if closes <= end:
                at = self.placed[g]
                for r in range(at, at + self.groups[g].count):
                    if not used[r]:
                        used[r] = 1
                        barred.append(r)
        return barred


def _lowest_free(used: bytearray, count: int, align: int) -> int:
    """Start of the lowest run of `count` free registers at a multiple of `align` (the array grows as needed)."""
    used.extend(bytes(count + align - len(used) % align))
    free_run, start = bytes(count), 0
    while True:
        start = used.find(free_run, start)
        if start % align == 0:
            return start
        start += align - start % align


_FILE_SIZE = {"v": ("arch_vgprs", "VGPRs"), "a": ("agprs", "AGPRs for accumulators"),
              "s": ("addressable_sgprs", "SGPRs")}


def _available(arch, file: str) -> int:
    return getattr(arch, _FILE_SIZE[file][0])


def check_budget(arch, file: str, needed: int, live: list = ()):
    """ResourceError (needed vs available, and what holds the registers) when `needed` exceeds the file."""
    what, available = _FILE_SIZE[file][1], _available(arch, file)
    if needed <= available:
        return
    holders = Counter()
    for grp in live:
        holders[grp.what or "temporaries"] += grp.count
    held = ", ".join(f"{name}: {n}" for name, n in holders.most_common(6))
    raise ResourceError(f"register budget exceeded: needs {needed} {what}, {arch.name} has {available}"
                        + (f" (live at the peak: {held})" if held else "")
                        + ". tilegcn never spills: use smaller tiles or more threads")


def register_counts(arch, vgprs: int, agprs: int, sgprs: int) -> dict:
    """The kernel descriptor's register fields from the allocation's peaks."""
    vgprs, sgprs = max(vgprs, 1), max(sgprs, 1)
    accum_offset = -(-vgprs // arch.accum_offset_granule) * arch.accum_offset_granule
    return dict(vgprs=vgprs, agprs=agprs, sgprs=sgprs, accum_offset=accum_offset,
                next_free_vgpr=accum_offset + agprs if agprs else vgprs)


_SLOTS = operator.attrgetter("operands", "defs", "uses")


def _rewrite(insts: list, files: dict, placed: list) -> list:
    """`insts` with every virtual register replaced by its physical one (new Inst objects: `insts` stay as they
    are). Every operand, def and use slot of the kernel is mapped in one flat list (C loops: a mapping per
    instruction and slot kind cost three list comprehensions an instruction), then cut back into instructions."""
    slots = list(chain.from_iterable(map(_SLOTS, insts)))  # operands, defs, uses of each instruction in turn
    flat = list(chain.from_iterable(slots))
    physical = _physical_operands(set(flat), files, placed)
    mapped = tuple(map(physical.get, flat, flat))  # (a tuple: its slices are the new slots as they are)
    out = []
    start = 0
    units_of: dict = {}  # a physical defs or uses tuple -> its units (a kernel names each of few hundred many times)
    ends = iter(accumulate(map(len, slots)))  # where each slot's operands end in `mapped`
    for i, operands_end, defs_end, uses_end in zip(insts, ends, ends, ends):
        new_operands = mapped[start:operands_end]
        new_defs = mapped[operands_end:defs_end]
        new_uses = mapped[defs_end:uses_end]
        start = uses_end
        new = Inst(i.op, new_operands, new_defs, new_uses, i.kind, i.suffix, i.comment)
        # Inst.def_units / use_units, which the wait-count and hazard passes read of every instruction, computed
        # here rather than through the lazy attribute (its two calls per instruction cost as much as the work)
        facts = new.__dict__
        units = units_of.get(new_defs)
        if units is None:
            units = units_of[new_defs] = unit_ids_of(new_defs)
        facts["def_units"] = units
        units = units_of.get(new_uses)
        if units is None:
            units = units_of[new_uses] = unit_ids_of(new_uses)
        facts["use_units"] = units
        out.append(new)
    return out


def _physical_operands(distinct: set, files: dict, placed: list) -> dict:
    """{operand: the operand over physical registers} for every operand of `distinct` that names a virtual
    register: a virtual Reg becomes the physical Reg its group was placed at, an operand wrapping one
    (elementwise._Neg) is rebuilt around that. Numbers are left out (1, 1.0 and True are one set element)."""
    virtual = [o for o in distinct if type(o) is Reg and o.virtual]
    out = dict(zip(virtual, regs_of([_physical_key(r, files, placed) for r in virtual])))
    for o in distinct:
        kind = type(o)
        if kind not in _NOT_WRAPPERS and isinstance(getattr(o, "reg", None), Reg) and o.reg.virtual:
            out[o] = kind(regs_of([_physical_key(o.reg, files, placed)])[0])
    return out


def _physical_key(r: Reg, files: dict, placed: list) -> tuple:
    """The (file, index, count, virtual) of the physical register virtual `r` was placed at."""
    vf = files[r.file]
    g = vf.group_of[r.index]
    if placed[g] < 0:
        raise ValueError(f"internal: {r} is an operand of no instruction's defs or uses")
    return r.file, placed[g] + r.index - vf.groups[g].base, r.count, False


_NOT_WRAPPERS = (Reg, int, float, bool, str)


def check_workgroup_fits(arch, counts: dict, threads: int):
    """ResourceError when a wave's unified register count (the arch VGPRs up to accum_offset, then the AGPRs)
    leaves no room for a workgroup of `threads` on one CU: such a code object assembles, but every launch of it
    fails on a GPU (the per-file limits `_scan` checks allow 256 + 256, which fits one wave per SIMD only)."""
    needed, budget = counts["next_free_vgpr"], arch.workgroup_register_budget(threads)
    if needed <= budget:
        return
    waves = -(-threads // arch.wave_size)
    raise ResourceError(
        f"register budget exceeded: needs {counts['vgprs']} VGPRs + {counts['agprs']} AGPRs (from accum_offset "
        f"{counts['accum_offset']}) = {needed} registers of the unified file per wave; {threads} threads are {waves} "
        f"waves, {-(-waves // arch.simds_per_cu)} on each of the CU's {arch.simds_per_cu} SIMDs, which leaves "
        f"{budget} per wave on {arch.name}, or the workgroup cannot launch. tilegcn never spills: use fewer num_stages, smaller tiles or fewer threads")
