"""Instruction scheduling: a dependency-graph list scheduler per basic block that keeps the MFMA pipe busy.

Input: the lowered instruction list (defs/uses/kinds filled in, physical or virtual `Reg`s, `lds_tag` memory
effects, no `s_waitcnt` and no hazard `s_nop` yet). Output: the same instructions, each basic block permuted
within itself (labels stay first, the branch or `s_endpgm` that ends a block stays last); `interleave=False`
("plain") returns the list unchanged, so the two can be compared (`@tilegcn.jit(schedule="plain")`). Only blocks
holding an MFMA are scheduled (the GEMM K loop, its prologue and epilogue); every other block keeps source order.

Dependencies (an edge keeps two instructions in source order), computed per 32-bit register unit of `defs`/`uses`
so that physical and virtual registers work alike: read after write, write after read, write after write; plus
implicit state the operand lists do not name, each modelled as a pseudo-unit that instructions read or write:
  - SCC: every SALU op but `s_mov*` / `s_mul*` reads and writes it (`s_add_u32` ... `s_cmp_*`, `s_cselect_*`),
    so scalar arithmetic keeps its order and the compare stays last before its `s_cbranch_scc*`;
  - VCC: `v_cmp*`, `v_cndmask*`, `v_div_*` and carry ops (`_co_`) read and write it;
  - EXEC: every vector instruction reads it, so nothing vector crosses `s_and_saveexec_b64` / `s_mov_b64 exec`;
  - LDS: `ds_read` reads it, `ds_write` and LDS DMA write it (so reads move among reads only), `s_barrier`
    writes it: no LDS access crosses a barrier in either direction;
  - global memory: buffer/scalar loads and LDS DMA read it, buffer stores and `s_barrier` write it (stores keep
    their order with every load and store; nothing memory crosses a barrier);
  - everything else (`s_nop`, `s_setprio`, `s_waitcnt`, an unknown kind) is a full fence.

The heuristic (what llvm-mca and the timing model reward). Measured with llvm-mca-22 (`-mcpu=gfx950` and gfx942):
the AMDGPU model issues in order, one instruction a cycle, and an MFMA holds the XDL pipe for one cycle per pass;
other instructions issue under it, so 7 single-cycle instructions after an 8-pass MFMA cost nothing and the 8th
costs a cycle (8 MFMAs each followed by 7 `ds_read_b128`s: 64.1 cycles an iteration, by 9: 80.1; grouping the
reads after the MFMAs instead of between them costs one cycle there, but a run of 48 DMA-issue instructions
between two MFMAs costs 41). The timing model (runtime/emulator/timing/cu.py) is the same in issue slots:
one instruction per 4-clk slot, an MFMA holds the pipe `passes x 4` clk. So this is a list scheduler on a clock of
issue slots: an instruction is ready when its predecessors have issued and their results are due (`ds_read`
-> user: the arch's LDS latency; buffer / scalar load -> user: L2-hit / SMEM latency; MFMA -> user: its passes;
SALU write of M0 -> LDS DMA: the M0 hazard's wait states, so the gap is filled by useful work instead of
`s_nop`); each slot issues the ready MFMA first when the XDL pipe is free, else the ready instruction earliest
in source order, so the next group's `ds_read`s, the next stage's LDS-DMA issues with their M0 writes, and the
address arithmetic fill the slots between back-to-back MFMAs, as early as they may (issuing loads early hides
their latency), up to `passes - 1` per MFMA. Source-order priority keeps the emitted structure (reads of step
k+1 before the MFMAs of step k, copies in slot order) and makes the result deterministic.

What it cannot move: the copies of a pipelined loop's first unrolled stage sit between the loop label and the
barrier that publishes the stage the MFMAs read (they must issue before that barrier's wait so it may leave them
in flight), so only the second stage's copies fill MFMA gaps (those of the first stage's MFMAs). `s_setprio` is
not emitted: a 256-thread GEMM workgroup puts one wave on each SIMD, where priority arbitrates nothing, and both
llvm-mca and the timing model charge its issue slot (measured in bench/loop_metrics.py's history: see README).
"""
from __future__ import annotations

import math

from . import cfg, isa
from .arch import TIMING

INTERLEAVE, PLAIN = "interleave", "plain"
SCHEDULES = (INTERLEAVE, PLAIN)

_VECTOR = (isa.VALU, isa.MFMA, isa.VMEM_LOAD, isa.VMEM_STORE, isa.LDS_DMA, isa.DS_READ, isa.DS_WRITE)
_KNOWN = _VECTOR + (isa.SALU, isa.SMEM, isa.BARRIER)
_SCC, _VCC, _EXEC, _M0 = ("scc", 0), isa.VCC.units(), isa.EXEC.units(), ("m0", 0)
_LDS, _GLOBAL, _FENCE = ("mem", "lds"), ("mem", "global"), ("mem", "fence")
_SCC_FREE = ("s_mov", "s_mul")
_VCC_USERS = ("v_cmp", "v_cndmask", "v_div_")


def schedule(insts: list, arch, interleave: bool = True) -> list:
    """`insts` with every MFMA-holding basic block list-scheduled (see the module docstring); unchanged if not
    `interleave`."""
    if not interleave:
        return list(insts)
    out: list = []
    for blk in cfg.blocks(insts):
        body = blk.insts
        out.extend(_schedule_block(body, arch) if any(i.kind == isa.MFMA for i in body) else body)
    return out


def _effects(inst) -> tuple:
    """(units read, units written) of one instruction: its registers plus the implicit state it touches."""
    reads = [u for r in inst.uses for u in r.units()]
    writes = [u for r in inst.defs for u in r.units()]
    kind, op = inst.kind, inst.op
    reads.append(_FENCE)
    if kind not in _KNOWN:
        writes.append(_FENCE)
        return reads, writes
    if kind in _VECTOR:
        reads += _EXEC
    if kind == isa.SALU and not op.startswith(_SCC_FREE):
        reads.append(_SCC)
        writes.append(_SCC)
    if kind == isa.VALU and (op.startswith(_VCC_USERS) or "_co_" in op):
        reads += _VCC
        writes += _VCC
    if kind == isa.DS_READ:
        reads.append(_LDS)
    elif kind in (isa.DS_WRITE, isa.LDS_DMA):
        writes.append(_LDS)
    if kind in (isa.VMEM_LOAD, isa.SMEM, isa.LDS_DMA):
        reads.append(_GLOBAL)
    elif kind == isa.VMEM_STORE:
        writes.append(_GLOBAL)
    if kind == isa.BARRIER:
        writes += [_LDS, _GLOBAL]
    return reads, writes


class _Latency:
    """Issue slots from an instruction's issue to when a reader of its result may issue."""

    def __init__(self, arch):
        t = TIMING[arch.name]
        slots = lambda clk: math.ceil(clk / t.issue_slot_clk)  # noqa: E731
        self.after = {isa.DS_READ: slots(t.lds_latency_clk), isa.SMEM: slots(t.smem_latency_clk),
                      isa.VMEM_LOAD: slots(t.l2_hit_latency_clk)}
        self.m0_to_dma = arch.m0_write_to_lds_dma_nops + 2  # N + 1 wait states between them
        self.arch = arch

    def passes(self, inst) -> int:
        from .hazards import _mfma_passes

        return _mfma_passes(inst.op, self.arch)

    def raw(self, producer, consumer, unit) -> int:
        if producer.kind == isa.MFMA:
            return self.passes(producer)
        if unit == _M0 and consumer.kind == isa.LDS_DMA:
            return self.m0_to_dma
        if unit[0] == "mem":
            return 1
        return self.after.get(producer.kind, 1)


def _dependencies(nodes: list, latency: _Latency) -> list:
    """preds[i]: {j: slots} for every j < i that must issue before node i, with the slots from j's issue."""
    preds: list = [{} for _ in nodes]
    last_write: dict = {}
    readers: dict = {}

    def edge(j, i, slots):
        if j != i and preds[i].get(j, -1) < slots:
            preds[i][j] = slots

    for i, inst in enumerate(nodes):
        reads, writes = _effects(inst)
        for u in reads:
            j = last_write.get(u)
            if j is not None:
                edge(j, i, latency.raw(nodes[j], inst, u))
        for u in writes:
            j = last_write.get(u)
            if j is not None:
                edge(j, i, 0)
            for j in readers.pop(u, ()):
                edge(j, i, 0)
            last_write[u] = i
        written = set(writes)
        for u in reads:
            if u not in written:
                readers.setdefault(u, []).append(i)
    return preds


def _list_schedule(nodes: list, preds: list, latency: _Latency) -> list:
    """The node order (see the module docstring): MFMAs back to back, the rest in the slots between them."""
    n = len(nodes)
    succs: list = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for j, slots in ps.items():
            succs[j].append((i, slots))
    waiting = [len(ps) for ps in preds]
    due = [0] * n
    mfma = [node.kind == isa.MFMA for node in nodes]
    ready = [i for i in range(n) if not waiting[i]]
    order: list = []
    clock = pipe_free = 0
    while ready:
        pick = None
        if pipe_free <= clock:
            pick = min((i for i in ready if mfma[i] and due[i] <= clock), default=None)
        if pick is None:
            pick = min((i for i in ready if not mfma[i] and due[i] <= clock), default=None)
        if pick is None:  # nothing can issue in this slot: skip to the first that can
            clock = min(max(due[i], pipe_free) if mfma[i] else due[i] for i in ready)
            continue
        ready.remove(pick)
        order.append(pick)
        if mfma[pick]:
            pipe_free = clock + latency.passes(nodes[pick])
        for i, slots in succs[pick]:
            due[i] = max(due[i], clock + slots)
            waiting[i] -= 1
            if not waiting[i]:
                ready.append(i)
        clock += 1
    assert len(order) == n, "dependency cycle in a basic block"
    return order


def _schedule_block(insts: list, arch) -> list:
    """One basic block scheduled; its label stays first and its terminator last, comments go with the
    instruction that follows them."""
    head = [insts[0]] if insts[0].kind == isa.LABEL else []
    last = insts[-1]
    tail = [last] if last.kind == isa.BRANCH or last.op in cfg.ENDS else []
    nodes, notes, pending = [], [], []
    for inst in insts[len(head):len(insts) - len(tail)]:
        if inst.kind == isa.COMMENT:
            pending.append(inst)
            continue
        nodes.append(inst)
        notes.append(pending)
        pending = []
    latency = _Latency(arch)
    order = _list_schedule(nodes, _dependencies(nodes, latency), latency)
    out = list(head)
    for i in order:
        out += notes[i]
        out.append(nodes[i])
    return out + pending + tail
