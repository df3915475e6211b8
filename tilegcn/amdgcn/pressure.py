"""Register-pressure relief: the allocator's last resort before a ResourceError (tilegcn never spills).

Three rewrites, used together and only when every other allocation attempt has failed (compiler._relieve_pressure),
so a kernel that fitted before keeps its registers and its code byte for byte:

  - `split_groups`: a virtual group is cut into the independent pieces its instructions actually name. A fragment
    is allocated as one group (64 VGPRs for a 128x128 fp16 tile over 128 threads), so it is live as a whole from its
    first load to its last read; its registers, though, are named in pieces (a `buffer_load_dwordx4` writes 4, a
    VALU op reads 1). Registers that some operand names together stay together (a tuple, an MFMA operand); the rest
    become groups of their own, each with its own live interval, so the part of a fragment already consumed frees
    its registers while the rest is still in use.
  - `split_webs`: a piece rewritten whole (and not read by the rewrite) where the rewrite surely kills the old value
    gets fresh virtual registers from there on, so a fragment that an unrolled loop rewrites each step is one value
    per step instead of one value from the first step to the last.
  - `sink_loads`: within a basic block, a global load is issued at most `window` loads ahead of the first use of
    an earlier load's data (with the address arithmetic only it reads), instead of all loads up front. A copy
    `T.copy(global, fragment)` followed by the T.Parallel that reads the fragment once (flash decoding's combine
    kernel: `o_accum_local += po_local * scale_local`) then holds `window + 1` loads' registers instead of the whole
    fragment. It trades latency hiding for registers: the window is the largest of `WINDOWS` that fits.

`sink_loads` keeps every dependency of the scheduler's graph (schedule._dependencies: registers, SCC/VCC/M0/EXEC, LDS,
global memory, barriers, fences), so the rewritten order computes the same thing; the wait-count pass places the
`s_waitcnt`s for the new order afterwards.
"""
from __future__ import annotations

import heapq
from types import SimpleNamespace

from . import cfg, isa
from .regalloc import Group, VirtualFile
from .schedule import _dependencies, _Latency, block_parts

WINDOWS = (8, 4, 2, 1)  # loads in flight ahead of the consumer, most latency hiding first


def split_groups(insts: list, b) -> SimpleNamespace:
    """A builder-like namespace (`v`, `s`, `a`, `arch`) whose virtual files number the same virtual registers as
    `b`'s, in groups cut to the runs of registers `insts` name together (module doc). The instructions need no
    rewrite: they name virtual registers by index, which the new files map to the new groups."""
    files = {"v": b.v, "s": b.s, "a": b.a}
    joined = {name: _named_runs(insts, name) for name in files}
    groups: list = []
    new = {}
    for name, vf in files.items():
        nf = VirtualFile(name, groups)
        nf.reserved = vf.reserved
        nf.group_of = [-1] * len(vf.group_of)
        for number in vf.numbers:
            _split_one(vf.groups[number], joined[name], nf)
        new[name] = nf
    return SimpleNamespace(v=new["v"], s=new["s"], a=new["a"], arch=b.arch)


def split_webs(insts: list, b) -> list:
    """`insts` with a group's registers renamed (new groups of `b`'s files, as split_groups made them) from each
    instruction on that rewrites the whole group without reading it, where that rewrite surely kills the old value:
    outside every loop, on no path a forward branch can skip, in a kernel that never writes EXEC (a write under a
    partial EXEC keeps the other lanes' old values). An unrolled loop's fragment rewritten each step (flash
    decoding's `po_local`) is then one value per step, each live from its rewrite to its last read."""
    if any(r.file == "exec" for inst in insts for r in inst.defs):
        return insts
    covered = bytearray(len(insts))  # 1: inside a loop or skippable by a forward branch
    labels = {inst.op: pos for pos, inst in enumerate(insts) if inst.kind == isa.LABEL}
    for pos, inst in enumerate(insts):
        if inst.kind == isa.BRANCH and inst.operands:
            target = labels.get(str(inst.operands[0]))
            if target is not None:
                lo, hi = sorted((pos, target))
                covered[lo:hi + 1] = b"\x01" * (hi + 1 - lo)
    files = {"v": b.v, "s": b.s, "a": b.a}
    delta: dict = {}  # (file, group number) -> index shift of its current web
    seen: set = set()
    out = []
    for pos, inst in enumerate(insts):
        read = {_group_key(files, r) for r in inst.uses if r.virtual}
        renamed = False
        if not covered[pos] and _writes_every_lane(inst):
            for r in inst.defs:
                key = _group_key(files, r) if r.virtual else None
                if key is None or key in read or key not in seen:
                    continue
                grp = files[r.file].groups[key[1]]
                if r.index == grp.base and r.count == grp.count:  # the whole group, and not read: a new value
                    delta[key] = _new_group(files[r.file], grp) - grp.base
                    renamed = True
        seen.update(read)
        seen.update(_group_key(files, r) for r in inst.defs if r.virtual)
        if delta and (renamed or any(_group_key(files, r) in delta for r in (*inst.uses, *inst.defs) if r.virtual)):
            inst = _renamed(inst, files, delta)
        out.append(inst)
    return out


def _writes_every_lane(inst) -> bool:
    """False for a DPP move whose row or bank mask leaves lanes out (xlane's row_bcast): those lanes keep the old
    value, so the write does not start a new one."""
    masks = [m.split(":")[1] for m in inst.suffix.split() if m.startswith(("row_mask:", "bank_mask:"))]
    return all(m == "0xf" for m in masks)


def _group_key(files: dict, r) -> tuple:
    return r.file, files[r.file].group_of[r.index]


def _new_group(vf: VirtualFile, grp: Group) -> int:
    """A fresh group of `vf` shaped like `grp`; its first virtual index."""
    base = len(vf.group_of)
    number = len(vf.groups)
    vf.groups.append(Group(base, grp.count, grp.align, grp.what))
    vf.numbers.append(number)
    vf.group_of.extend([number] * grp.count)
    return base


def _renamed(inst, files: dict, delta: dict):
    """`inst` with each virtual register of a renamed group shifted into that group's current web."""
    def move(o):
        if type(o) is isa.Reg:
            if o.virtual:
                shift = delta.get(_group_key(files, o))
                if shift:
                    return isa.Reg(o.file, o.index + shift, o.count, True)
            return o
        inner = getattr(o, "reg", None)
        if isinstance(inner, isa.Reg) and inner.virtual and delta.get(_group_key(files, inner)):
            return type(o)(move(inner))
        return o
    return isa.Inst(inst.op, tuple(map(move, inst.operands)), tuple(map(move, inst.defs)),
                    tuple(map(move, inst.uses)), inst.kind, inst.suffix, inst.comment)


def _named_runs(insts: list, file: str) -> set:
    """The virtual indices i of `file` such that some operand names both i and i + 1 (they must stay adjacent)."""
    joined = set()
    for r in {r for inst in insts for r in (*inst.defs, *inst.uses) if r.virtual and r.file == file}:
        joined.update(range(r.index, r.index + r.count - 1))
    return joined


def _split_one(grp: Group, joined: set, nf: VirtualFile):
    """Cut `grp` where no operand crosses and register the pieces in `nf`. A piece keeps the alignment its offset in
    the group had (its first register at a multiple of the group's alignment, or of its offset's largest power of
    two), so every slice an instruction names stays where the group's placement would have put it."""
    start = grp.base
    end = grp.base + grp.count
    for i in range(grp.base, end):
        if i + 1 < end and i in joined:
            continue
        offset = start - grp.base
        align = grp.align if offset % grp.align == 0 else offset & -offset
        number = len(nf.groups)
        nf.groups.append(Group(start, i + 1 - start, align, grp.what))
        nf.numbers.append(number)
        for j in range(start, i + 1):
            nf.group_of[j] = number
        start = i + 1


def sink_loads(insts: list, arch, window: int) -> list:
    """`insts` with each basic block's global loads issued at most `window` loads ahead of their consumers (module
    doc); blocks without such loads are unchanged."""
    out: list = []
    for blk in cfg.blocks(insts):
        out.extend(_sink_block(blk.insts, arch, window))
    return out


def _sink_block(body: list, arch, window: int) -> list:
    head, nodes, notes, pending, tail = block_parts(body)
    loads = [i for i, n in enumerate(nodes) if n.kind == isa.VMEM_LOAD and n.defs and n.defs[0].virtual]
    if len(loads) <= window:
        return body
    readers = _register_readers(nodes)
    first_use = {i: min(readers[i], default=len(nodes)) for i in loads}
    key = [float(i) for i in range(len(nodes))]
    moved = set()
    for n, i in enumerate(loads[window:]):
        due = first_use[loads[n]] - 0.5  # just before the first use of the load `window` earlier
        if due > key[i]:
            key[i] = due
            moved.add(i)
    for i in range(len(nodes) - 1, -1, -1):  # address arithmetic only moved loads read goes with them
        if nodes[i].kind in (isa.VALU, isa.SALU) and readers[i] and _only_registers(nodes[i]) \
                and all(r in moved for r in readers[i]):
            key[i] = min(key[r] for r in readers[i]) - 0.25
            moved.add(i)
    order = _ordered(nodes, key, arch)
    out = list(head)
    for i in order:
        out.extend(notes[i])
        out.append(nodes[i])
    return out + pending + tail


def _only_registers(inst) -> bool:
    """Whether the node writes virtual registers only (moving it later touches no state another node sees but
    through the registers it writes, which its readers wait for anyway)."""
    return bool(inst.defs) and all(r.virtual for r in inst.defs)


def _register_readers(nodes: list) -> list:
    """readers[i]: the later nodes that read a virtual register node i wrote (before another node rewrites it)."""
    readers: list = [[] for _ in nodes]
    writer: dict = {}  # virtual (file, index) -> the node that last wrote it
    for i, inst in enumerate(nodes):
        for r in inst.uses:
            if r.virtual:
                for u in range(r.index, r.index + r.count):
                    j = writer.get((r.file, u))
                    if j is not None and (not readers[j] or readers[j][-1] != i):
                        readers[j].append(i)
        for r in inst.defs:
            if r.virtual:
                for u in range(r.index, r.index + r.count):
                    writer[(r.file, u)] = i
    return readers


def _ordered(nodes: list, key: list, arch) -> list:
    """A topological order of the block's dependency graph that issues the ready node of the smallest key first."""
    preds = _dependencies(nodes, _Latency(arch))
    succs: list = [[] for _ in nodes]
    for i, ps in enumerate(preds):
        for j in ps:
            succs[j].append(i)
    waiting = [len(ps) for ps in preds]
    ready = [(key[i], i) for i in range(len(nodes)) if not waiting[i]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, pick = heapq.heappop(ready)
        order.append(pick)
        for i in succs[pick]:
            waiting[i] -= 1
            if not waiting[i]:
                heapq.heappush(ready, (key[i], i))
    assert len(order) == len(nodes), "dependency cycle in a basic block"
    return order
