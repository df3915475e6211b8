"""Instruction scheduling: a dependency-graph list scheduler per basic block that keeps the MFMA pipe busy.

Input: the lowered instruction list (defs/uses/kinds filled in, physical or virtual `Reg`s, `lds_tag` memory
effects, no `s_waitcnt` and no hazard `s_nop` yet). Output: the same instructions, each basic block permuted
within itself (labels stay first, the branch or `s_endpgm` that ends a block stays last); `interleave=False`
("plain") returns the list unchanged, so the two can be compared (`@tilegcn.jit(schedule="plain")`). Only blocks
holding an MFMA are scheduled: a loop body (the GEMM's K loop) whole, a block that runs once (the pipeline's
drain) up to its last MFMA; the rest keeps source order (the epilogue's accumulator stores: scheduling them too
took 2.4x the time for code that runs once, after the MFMAs).

Dependencies (an edge keeps two instructions in source order), computed per 32-bit register unit of `defs`/`uses`
so that physical and virtual registers work alike (the units of a register no other register of the block overlaps
count as one: isa.unit_keys): read after write, write after read, write after write; plus
implicit state the operand lists do not name, each modelled as a pseudo-unit that instructions read or write:
  - SCC, VCC, M0 where the instruction table (isa_table.py) says an instruction reads or writes them without naming
    them (`s_add_u32` writes SCC, `s_addc_u32` and `s_cselect_*` read it, `s_cbranch_scc*` reads it, `v_div_fmas`
    reads VCC), so a compare stays last before its `s_cbranch_scc*` and a carry chain keeps its order;
  - EXEC: every vector instruction reads it, so nothing vector crosses `s_and_saveexec_b64` / `s_mov_b64 exec`;
  - LDS: `ds_read` reads it, `ds_write` and untagged LDS DMA write it (so reads move among reads only),
    `s_barrier` writes it: no LDS access crosses a barrier in either direction. An LDS DMA that names the pipeline
    stage it writes (`waitcnt.lds_tag` in its defs) reads it instead: it stays ordered with barriers and untagged
    writes, and with its own stage's accesses through the tag, while the ds_reads of the stage being computed
    (published by an earlier barrier; the stage a DMA overwrites is always behind a barrier that ended its reads)
    issue ahead of it, so the MFMAs get their operands first and the copies fill the slots between them;
  - barriers: `s_barrier` writes the fence unit below, so nothing crosses a barrier. Register-only work could,
    but MFMAs before a barrier keep the pipe busy while the wave waits there for the other waves (moved after
    it, the wave would idle at the barrier with its MFMA work still to do), and VALU work after it (gfx942's
    `v_perm_b32` packing of a register-staged stage) hoisted into the previous step reads loads issued in that
    step, whose wait then drains the queue. The timing model, 2048^3 bf16: gfx950 256x256x64 NT in K
    phases on MI355X 19 % more cycles with MFMAs free to cross (llvm-mca, which sees no other wave, prefers that:
    1.02 vs 1.07 x the bound); gfx942 256x256x64 NN on MI300X 14 % more with VALU free to cross;
  - global memory: buffer/scalar loads and LDS DMA read it, buffer stores and `s_barrier` write it (stores keep
    their order with every load and store; nothing memory crosses a barrier);
  - the fence: every instruction reads it where the block writes it; `s_barrier` and everything else (`s_nop`,
    `s_setprio`, `s_waitcnt`, an unknown kind) write it: full fences.

The heuristic (what llvm-mca and the timing model reward). Measured with llvm-mca-22 (`-mcpu=gfx950`, gfx942 alike)
on hand-written loops: the AMDGPU model issues in order, one instruction a cycle, and an MFMA holds the XDL pipe one
cycle per pass while other instructions issue under it. 8 independent 8-pass MFMAs each followed by 7 `ds_read_b128`
take 64.1 cycles an iteration (the MFMA bound: 64), each followed by 9 take 80.1; the 8 reads of a group placed after
the 8 MFMAs instead of between them cost 65.1. So order matters exactly where more than `passes - 1` non-MFMA
instructions sit between two MFMAs (a run of copy issues, a group of reads), or where a read is consumed before its
latency has passed. The timing model (perfmodel/cu.py) is the same in issue slots: one instruction per
4-clk slot, an MFMA holds the pipe `passes x 4` clk. So this is a list scheduler on a clock of issue slots: an
instruction is ready when its predecessors have issued and their results are due (`ds_read` -> user: the arch's
LDS latency; buffer / scalar load -> user: L2-hit / SMEM latency; MFMA -> user: its passes; SALU write of M0 ->
LDS DMA and VALU write -> MFMA reading it: the hazard's wait states, so useful work fills the gap instead of `s_nop`:
gfx950 128x64 d128 flash attention's rescale -> PV MFMA, 3 s_nop a KV tile fewer, llvm-mca 344.1 -> 341.1, the
timing model 1,777 -> 1,826 TFLOP/s; an MFMA's result -> VALU reader at its hazard's 12 slots instead of its 8
passes measured worse, 344.1 and 1,760: the next MFMA takes the slots and the reader waits on); each slot issues
the ready MFMA first when the XDL pipe is free, else the ready instruction earliest in source order, with two
exceptions:
  - a packed-f32 VALU op (v_pk_mul_f32, ...) is not ready until `passes + 2` slots after the last MFMA's issue
    (arch.mfma_valu_holds, S33: the hardware holds it that long; the timing model too), so it goes where the matrix
    pipe idles (flash attention's rescale of acc_o: while the step's first operands load) instead of stalling the
    pipe in an MFMA's shadow;
  - VALU work that no MFMA and no memory instruction waits for before the next barrier (_deferred) comes after the
    rest: in an in-wave software pipeline's step (passes/pipelining.py, LAST_GEMM) the next tile's softmax precedes
    this tile's PV operand reads in source order, and would otherwise hold them back until the softmax is done,
    leaving PV's MFMAs back to back after it. On gfx950 128x64 d128 (bench/attention_loop.py) the two take the
    rotated loop from llvm-mca 421.8 to 403.0 cycles a tile and the timing model from 1,249 to 1,432 TFLOP/s; the
    GEMM loops of bench/dump_asm.py hold no such VALU work and no packed-f32 op, and stay byte-identical.
The next group's
`ds_read`s, the next stage's copy issues with their M0 writes and the address arithmetic thus fill the slots between
back-to-back MFMAs, as early as they may (early loads hide their latency), up to `passes - 1` per MFMA; source-order
priority keeps the emitted structure (reads of step k+1 before the MFMAs of step k, copies in slot order) and makes
the result deterministic.

What it cannot move: the copies of a pipelined loop's first unrolled stage sit between the loop label and the
barrier that publishes the stage its MFMAs read (they must issue before that barrier's wait, which leaves them in
flight), so only the second stage's copies (and its barrier) fill MFMA gaps, those of the first stage's last MFMAs.
Such a barrier then has LDS reads in flight (their MFMAs follow it); the wait pass waits for them before the barrier,
since another wave overwrites that stage after it (waitcnt.py).

`s_setprio` is not emitted: raising it around the loop's MFMAs measured slightly worse in both models (gfx950
128x128x64 NT num_stages=2, 8x8 workgroups: timing model 13971 vs 13960 cycles, llvm-mca 326.7 vs 324.7 cycles an
iteration): a 256-thread GEMM workgroup has one wave per SIMD, where priority arbitrates little, and the
instruction costs an issue slot. The 8-wave ping-pong K loop (passes/pipelining.py), where two waves share a SIMD
and one runs its MFMAs while the other reads, emits it only where `Arch.gemm_ping_pong_prio` says so; that is 0 on
both arches: gfx950 256x256x64 bf16 at 8192^3 on MI355X, timing model 1.101 M cycles with s_setprio 1 around the MFMA
cluster against 1.094 M without (the groups issue different instruction categories, so priority decides little).
"""
from __future__ import annotations

import functools
import heapq
import math

from . import cfg, isa, isa_table
from .arch import PACKED_F32_VALU, TIMING, mfma_valu_holds
from .hazards import _mfma_passes
from .waitcnt import LDS_FILE

INTERLEAVE, PLAIN = "interleave", "plain"
SCHEDULES = (INTERLEAVE, PLAIN)

_VECTOR = isa_table.vector_kinds()  # the kinds that read EXEC as their lane mask
_KNOWN = _VECTOR + (isa.SALU, isa.SMEM, isa.BARRIER)
_LDS, _GLOBAL, _FENCE = -1, -2, -3  # pseudo-units (negative); register units are numbered from 0
_M0 = isa.M0.unit_ids[0]  # (a single unit: its own key in isa.unit_keys)
# what a VALU result may be waited for by within its barrier segment, short of which it is deferred (_deferred)
_WAITED = (isa.MFMA, isa.DS_READ, isa.DS_WRITE, isa.DS_LANE, isa.LDS_DMA, isa.VMEM_LOAD, isa.VMEM_STORE, isa.SMEM)


def schedule(insts: list, arch, interleave: bool = True) -> list:
    """`insts` with the blocks that hold MFMAs list-scheduled (see the module docstring); unchanged if not
    `interleave`."""
    if not interleave:
        return list(insts)
    out: list = []
    for n, blk in enumerate(cfg.blocks(insts)):
        body = blk.insts
        kinds = [inst.kind for inst in body]
        if isa.MFMA not in kinds:
            out.extend(body)
            continue
        if n in blk.succs:  # a loop body: it branches back to its own label
            out.extend(_schedule_block(body, arch))
        else:  # runs once: only its MFMA part, not the epilogue's stores after the last MFMA
            last_mfma = len(kinds) - 1 - kinds[::-1].index(isa.MFMA)
            out.extend(_schedule_block(body[:last_mfma + 1], arch) + body[last_mfma + 1:])
    return out


def _effects(inst, keys: dict) -> tuple:
    """(units read, units written) of one instruction, as `keys` (isa.unit_keys) of its registers, plus the
    implicit state it touches, but for the reads of EXEC and of the fence every vector / every instruction makes
    (_dependencies adds those where the block writes them)."""
    reads = [u for r in inst.uses for u in keys[r]]
    writes = [u for r in inst.defs for u in keys[r]]
    kind = inst.kind
    if kind == isa.MFMA:  # (most nodes: no implicit state)
        return reads, writes
    implicit_reads, implicit_writes, implicit_uses, implicit_defs = _implicit(kind, inst.op)
    if kind == isa.LDS_DMA and _names_lds_region(inst):  # a pipeline stage's DMA: see the module docstring (LDS)
        implicit_reads, implicit_writes = implicit_reads + (_LDS,), ()
    for r in implicit_uses:  # (VCC and EXEC are keys of every program: program_unit_keys; SCC and M0 one unit)
        reads += keys.get(r, r.unit_ids)
    for r in implicit_defs:
        writes += keys.get(r, r.unit_ids)
    reads += implicit_reads
    writes += implicit_writes
    return reads, writes


@functools.lru_cache(maxsize=None)
def _implicit(kind: str, op: str) -> tuple:
    """(pseudo-units read, pseudo-units written, implicit registers read, implicit registers written: the
    instruction table's) of an instruction of `kind` and `op` (an LDS DMA as untagged: _effects turns a tagged one's
    LDS write into a read), per kind and op once per process."""
    if kind not in _KNOWN:
        return (), (_FENCE,), (), ()
    reads, writes = [], []
    if kind == isa.DS_READ:
        reads.append(_LDS)
    elif kind in (isa.DS_WRITE, isa.LDS_DMA):
        writes.append(_LDS)
    if kind in (isa.VMEM_LOAD, isa.SMEM, isa.LDS_DMA):
        reads.append(_GLOBAL)
    elif kind == isa.VMEM_STORE:
        writes.append(_GLOBAL)
    if kind == isa.BARRIER:
        writes += [_LDS, _GLOBAL, _FENCE]
    row = isa_table.lookup(op, "lds" if kind == isa.LDS_DMA else "")
    return tuple(reads), tuple(writes), row.implicit_uses, row.implicit_defs


def _names_lds_region(inst) -> bool:
    return any(r.file == LDS_FILE for r in inst.defs)


def _all_effects(nodes: list) -> list:
    """_effects of every node, with the implicit reads of EXEC (vector instructions) and of the fence (every
    instruction) added only where some node of the block writes them: a unit nothing writes makes no edge, and
    these two would otherwise be a third of the units the dependency loop visits."""
    keys = isa.program_unit_keys(nodes)
    effects = [_effects(node, keys) for node in nodes]
    written = set().union(*[writes for _, writes in effects])
    exec_read = keys[isa.EXEC] if written.intersection(keys[isa.EXEC]) else ()
    fence_read = (_FENCE,) if _FENCE in written else ()
    if exec_read or fence_read:
        for node, (reads, _) in zip(nodes, effects):
            reads += fence_read
            if node.kind in _VECTOR:
                reads += exec_read
    return effects


class _Latency:
    """Issue slots from an instruction's issue to when a reader of its result may issue."""

    def __init__(self, arch):
        t = TIMING[arch.name]
        slots = lambda clk: math.ceil(clk / t.issue_slot_clk)  # noqa: E731
        self.after = {isa.DS_READ: slots(t.lds_latency_clk), isa.DS_LANE: slots(t.lds_latency_clk),
                      isa.SMEM: slots(t.smem_latency_clk),
                      isa.VMEM_LOAD: slots(t.l2_hit_latency_clk)}
        self.m0_to_dma = arch.m0_write_to_lds_dma_nops + 2  # N + 1 wait states between them
        # slots between a wave's global loads: its share of the CU's TCP when every SIMD's wave loads (16 clk a
        # dwordx4 x 4 SIMDs = 16 slots; S18: the LLIR scheduler puts 4 16-clk MFMAs per buffer_load). Bunched,
        # a step's loads fill the TCP and its 12-entry queue and the waves stall issuing them (S18, v7 vs v8)
        self.load_pace = slots(t.tcp_clk_per_dword[4] * t.simds_per_cu)
        self.arch = arch

    def packed_hold(self, mfma) -> int:
        """Slots from MFMA `mfma`'s issue until a packed-f32 VALU op of its SIMD may issue."""
        src = [r.count * 4 for r in mfma.operands[1:3] if isinstance(r, isa.Reg)] or [8]
        return mfma_valu_holds(_mfma_passes(mfma, self.arch), max(src), src[0])[1]

    def of(self, producer) -> int:
        """Slots until a register `producer` writes may be read."""
        if producer.kind == isa.MFMA:
            return _mfma_passes(producer, self.arch)
        return self.after.get(producer.kind, 1)

    def between(self, producer, consumer) -> int:
        """Slots from `producer`'s issue until `consumer`, which reads a register it writes, may issue: its result
        latency, or where the arch asks wait states between the two (hazards.py), one more than those, so other
        work fills them instead of the hazard pass's s_nop (a VALU write read by an MFMA: flash attention's
        rescaled accumulator, its PV MFMA's srcC)."""
        if producer.kind == isa.VALU and consumer.kind == isa.MFMA:
            return max(self.of(producer), self.arch.every_mfma_hazard.valu_write_to_mfma_src + 1)
        return self.of(producer)


def _dependencies(nodes: list, latency: _Latency) -> list:
    """preds[i]: {j: slots} for every j < i that must issue before node i, with the slots from j's issue."""
    preds: list = []
    result_slots = [latency.of(node) for node in nodes]
    last_write: dict = {}
    readers: dict = {}
    for i, (inst, (reads, writes)) in enumerate(zip(nodes, _all_effects(nodes))):
        mine: dict = {}
        dma = inst.kind == isa.LDS_DMA
        for u in reads:
            j = last_write.get(u)
            if j is None:
                continue
            slots = 1 if u < 0 else result_slots[j] if nodes[j].kind != isa.VALU else latency.between(nodes[j], inst)
            if dma and u == _M0:
                slots = latency.m0_to_dma
            if mine.get(j, -1) < slots:
                mine[j] = slots
        for u in writes:
            j = last_write.get(u)
            if j is not None and j not in mine:
                mine[j] = 0
            if u in readers:
                for j in readers.pop(u):
                    if j not in mine:
                        mine[j] = 0
            last_write[u] = i
        mine.pop(i, None)
        preds.append(mine)
        for u in reads:  # (a unit it also wrote: a later writer's edge to it is there anyway, write after write)
            if u in readers:
                readers[u].append(i)
            else:
                readers[u] = [i]
    return preds


def _list_schedule(nodes: list, preds: list, latency: _Latency) -> list:
    """The node order (see the module docstring): MFMAs back to back, the rest in the slots between them.

    Nodes whose predecessors have all issued wait in `pending` (a heap by due slot) until their results are due,
    then in `ready_mfma` / `ready_load` (global loads: paced) / `ready_other` (heaps by source index)."""
    n = len(nodes)
    succs: list = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for j, slots in ps.items():
            succs[j].append((i, slots))
    waiting = [len(ps) for ps in preds]
    due = [0] * n
    pending = [(0, i) for i in range(n) if not waiting[i]]
    ready_mfma: list = []
    ready_load: list = []
    ready_other: list = []
    ready_packed: list = []  # packed-f32 VALU ops: an MFMA holds them off (arch.mfma_valu_holds)
    ready_of = [ready_mfma if node.kind == isa.MFMA else ready_load if node.kind in (isa.VMEM_LOAD, isa.LDS_DMA)
                else ready_packed if _packed_f32(node) else ready_other for node in nodes]
    later = _deferred(nodes, succs)
    order: list = []
    clock = pipe_free = load_free = packed_free = 0
    while pending or ready_mfma or ready_load or ready_other or ready_packed:
        while pending and pending[0][0] <= clock:
            i = heapq.heappop(pending)[1]
            heapq.heappush(ready_of[i], (later[i], i))
        if ready_mfma and pipe_free <= clock:
            pick = heapq.heappop(ready_mfma)[1]
            pipe_free = clock + latency.of(nodes[pick])
            packed_free = max(packed_free, clock + latency.packed_hold(nodes[pick]))
        elif ready_load and load_free <= clock and not (ready_other and ready_other[0] < ready_load[0]):
            pick = heapq.heappop(ready_load)[1]
            load_free = clock + latency.load_pace
        elif ready_packed and packed_free <= clock and not (ready_other and ready_other[0] < ready_packed[0]):
            pick = heapq.heappop(ready_packed)[1]
        elif ready_other:  # (a ready global load before `load_free` lets the rest pass it)
            pick = heapq.heappop(ready_other)[1]
        else:  # nothing can issue in this slot: skip to the first that can
            clock = min(([pending[0][0]] if pending else []) + ([pipe_free] if ready_mfma else []) +
                        ([load_free] if ready_load else []) + ([packed_free] if ready_packed else []))
            continue
        order.append(pick)
        for i, slots in succs[pick]:
            if clock + slots > due[i]:
                due[i] = clock + slots
            waiting[i] -= 1
            if not waiting[i]:
                if due[i] <= clock + 1:  # due by the next slot, whose scan of `pending` would move it at once
                    heapq.heappush(ready_of[i], (later[i], i))
                else:
                    heapq.heappush(pending, (due[i], i))
        clock += 1
    assert len(order) == n, "dependency cycle in a basic block"
    return order


def _packed_f32(node) -> bool:
    return node.kind == isa.VALU and PACKED_F32_VALU.match(node.op) is not None


def _deferred(nodes: list, succs: list) -> list:
    """1 for a VALU node that no MFMA and no memory instruction waits for before the block's next barrier (the
    online softmax of the next tile in an in-wave software pipeline, whose P the next step's MFMAs read), else 0."""
    n = len(nodes)
    segment, barriers = [0] * n, 0
    for i, node in enumerate(nodes):
        barriers += node.kind == isa.BARRIER
        segment[i] = barriers
    feeds = [False] * n  # whether an MFMA or memory instruction of its segment waits for its result
    for i in range(n - 1, -1, -1):
        feeds[i] = any(slots and segment[j] == segment[i] and (nodes[j].kind in _WAITED or feeds[j])
                       for j, slots in succs[i])
    return [int(node.kind == isa.VALU and not feeds[i]) for i, node in enumerate(nodes)]


def block_parts(insts: list) -> tuple:
    """(head, nodes, notes, pending, tail) of one basic block: its label (head) and terminator (tail), which stay
    where they are; the instructions between (nodes) that a reordering may move, each with the comments just before
    it (notes[i]); and the comments after the last node (pending)."""
    head = [insts[0]] if insts and insts[0].kind == isa.LABEL else []
    last = insts[-1] if insts else None
    tail = [last] if last is not None and (last.kind == isa.BRANCH or last.op in cfg.ENDS) else []
    nodes, notes, pending = [], [], []
    for inst in insts[len(head):len(insts) - len(tail)]:
        if inst.kind == isa.COMMENT:
            pending.append(inst)
            continue
        nodes.append(inst)
        notes.append(pending)
        pending = []
    return head, nodes, notes, pending, tail


def _schedule_block(insts: list, arch) -> list:
    """One basic block scheduled; its label stays first and its terminator last, comments go with the
    instruction that follows them."""
    head, nodes, notes, pending, tail = block_parts(insts)
    latency = _Latency(arch)
    order = _list_schedule(nodes, _dependencies(nodes, latency), latency)
    out = list(head)
    for i in order:
        out += notes[i]
        out.append(nodes[i])
    return out + pending + tail
