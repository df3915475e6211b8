"""Dynamic instruction streams from the functional emulator: the timing model's input.

`record(module, name, grid, block, args, ...)` runs the kernel on the emulated device for the workgroups
that share one XCD in the first dispatch round (workgroup i goes to XCD i % 8) and observes it through
the emulator's public trace API (tilegcn/runtime/emulator/tracing.py):
- the *stream* of each wave of the first of those workgroups: its pc sequence, with the extra LDS cycles
  of every DS instruction (the emulator's bank-conflict phases), `SKIPPED_LOAD` for a global load of which no
  lane was in its buffer's range (a masked tail's copy past the end: it returns zeros and reads no memory,
  docs/isa-notes.md), and markers where a loop was skipped;
- the *footprint* of every recorded workgroup: the 128-byte lines each of its global loads touches, with the
  load's position in the wave's stream of global loads (its step) and the loop iteration it ran in
  (segments between taken backward branches), for the L2 model.

Loop fast-forward. Simulating 128 K steps of a 256x256 tile in the functional emulator takes ~15 s here;
the timing model needs only a few steady iterations. A loop is any taken backward branch (a bottom test, a
rotated loop's unconditional s_branch back, out-of-line blocks branching back into the body). After
`detail_iterations` trips, the s_cbranch_scc* branches that ran once in each of the last three trips are
examined: one decided by an s_cmp of an SGPR that moves by a constant step against a fixed value changes its
outcome after a computable number of trips; the first to change ends the loop. The trace moves that counter
SGPR to the last trip (in every wave of the group), so the loop runs once more and the epilogue executes, and
checks at the next test that the counter arrived (else the loop just runs on). A loop unrolled many times over
(LONG_TRIP below) is examined after 2 trips, the first one's test read from the log before its first back edge,
and every trip but the last is skipped. The stream gets a `Skip` marker with the number of trips left out;
the timing model adds that many copies of the steady iteration time. The computed values after a fast-forward are garbage (the model needs only control flow and
addresses); a loop whose exit test cannot be recognised runs to the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import copy

import numpy as np
import torch

from ..runtime.emulator.tracing import Const, Reg, StopRun, run_traced, traced_machine

_CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}
MAX_TRIPS = 1 << 20
# A trip of at least this many instructions (a wave's, between two back edges, no inner loop) is a loop unrolled
# many times over (HipKittens' gfx950 GEMM: 18 K steps, ~2900 instructions a trip): one trip already repeats its
# steady pattern many times, so such a loop is fast-forwarded after half the `detail_iterations` trips (at least
# 2), all its trips but the last skipped, and the footprint run stops after its first steady trip. Shorter than
# any trip of it, longer than the longest other loop of the foreign set (aiter's int8 and FAv3 loops, ~1000
# instructions) and of tilegcn's own kernels (a few hundred).
LONG_TRIP = 2048
SKIPPED_LOAD = -1.0  # a stream entry's "extra" for a global load no lane of which was in range (module docstring)


def _none_in_range(access):
    """Per wave of the group: whether none of its lanes' global reads was in range (`access` = (addresses, active
    lanes) of a read, or None: not a global read)."""
    if access is None or access[1] is None:
        return None
    act = access[1]
    return (~act.reshape(act.shape[0], -1).any(1)).tolist()


@dataclass
class Skip:
    """Stream marker: `trips` iterations of the loop starting at pc index `loop` were fast-forwarded."""

    loop: int
    trips: int


@dataclass
class Trace:
    program: object  # emulator Program (handlers, descriptor)
    streams: list  # per wave of the detailed workgroup: list of (pc, extra LDS cycles) or Skip
    footprints: dict = field(default_factory=dict)  # (workgroup, segment) -> (steps, lines) arrays (l2.py)
    samples: list = field(default_factory=list)  # the streams of each detailed workgroup (streams is the first's)


class Tracer:
    """The machine's trace hook (see module docstring)."""

    def __init__(self, machine, instrs, detail_iterations, line_bytes, footprint_segments=(0, 1, 2), detailed=1):
        self.m = machine
        self.instrs = instrs
        self.detail = detail_iterations
        self.line_shift = line_bytes.bit_length() - 1
        self.segs_wanted = set(footprint_segments)
        self.wpw = machine.waves_per_wg
        # the streams of the chunk's first `detailed` workgroups, wave by wave (chunk-local wave numbers)
        self.streams = [[] for _ in range(self.wpw * detailed)]
        self.footprints = {}
        self.conflicts = 0
        self.access = None
        self.segment = {}  # chunk-local wave -> loop iterations completed (any loop)
        self.steps = {}  # chunk-local wave -> global load instructions executed
        self.loop_ranges = set()  # (target, pc) of the back edges taken
        self.loops = {}  # first wave of a wave group -> its _Loops (groups that run apart loop apart)
        # wave group -> (pc, operand values) of its last s_cmp: SCC is each wave's own, and the emulator runs
        # the groups of a ping-pong kernel in turns (switching at barriers, between an s_cmp and its branch)
        self.last_cmp = {}
        self.pc_of_addr = {ins.addr: k for k, ins in enumerate(instrs)}
        self.first_chunk = True
        self.stop_after = None  # stop the run once every wave completed this many loop trips
        self.executed = {}  # first wave of a wave group -> instructions it has executed (trip lengths)
        self.segment_start = {}  # first wave of a wave group -> self.executed when its current segment began
        self.long_trips = False  # a steady segment (loop trip) of LONG_TRIP instructions was seen

    # ---- hooks called by the machine ----------------------------------------------------------------
    def ds_conflicts(self, count):
        self.conflicts += count

    def global_access(self, addr, act, write):
        if not write:
            self.access = (addr, act)

    def step(self, g, h, pc):
        self.executed[g.waves[0]] = self.executed.get(g.waves[0], 0) + 1
        conflicts, self.conflicts = self.conflicts, 0
        access, self.access = self.access, None
        recorded = len(self.streams)
        if self.first_chunk and g.waves[0] < recorded:
            extra = conflicts / g.n
            outside = _none_in_range(access)
            for k, w in enumerate(g.waves):
                if w < recorded:
                    self.streams[w].append((pc, SKIPPED_LOAD if outside is not None and outside[k] else extra))
        if access is not None:
            self._footprint(g, *access)
        if h.cls == "salu" and h.mnemonic.startswith("s_cmp"):
            self.last_cmp[g.waves[0]] = (pc, self._operand_values(g, pc))
        elif h.cls == "branch" and g.state != "split":
            if self.detail and g.waves[0] in self.last_cmp and h.mnemonic in ("s_cbranch_scc0", "s_cbranch_scc1"):
                self._scc_branch(g, pc, g.pc != pc + 1)  # first: a bottom test belongs to the trip it ends
            if g.pc <= pc:
                self._back_edge(g, pc, g.pc)
            else:
                st = self.loops.get(g.waves[0])
                if st is not None and st.trips.get(pc):
                    st.trips[pc] = 0  # the loop exited

    # ---- footprints -----------------------------------------------------------------------------------
    def _footprint(self, g, addr, act):
        seg = self.segment.get(g.waves[0], 0)
        step = self.steps.get(g.waves[0], 0)  # the waves' count of global loads so far
        for w in g.waves:
            self.steps[w] = step + 1
        if seg not in self.segs_wanted:
            return
        addr, act = self._lane_ends(addr, act)
        n = addr.shape[0]
        rows = torch.arange(n, dtype=torch.int64, device=addr.device).view(n, 1, 1)
        # lines are counted from each buffer's start, as if it were line aligned (as hipMalloc's are), so
        # the estimate does not depend on where torch happened to allocate the tensor
        bases = self.m.mem.bases
        region = (torch.searchsorted(bases, addr.contiguous(), right=True) - 1).clamp(min=0)
        lines = ((addr - bases[region]) >> self.line_shift) | (region << 32)
        keys = (rows << 44) | lines  # [n, 64, k]
        keys = keys[act] if act is not None else keys.reshape(-1)
        wgs = [self.m.chunk_wgs[w // self.wpw] for w in g.waves]
        keys = np.unique(keys.cpu().numpy())  # sorted: by wave row, then line
        rows = keys >> 44
        lines = keys & ((1 << 44) - 1)
        fp = self.footprints
        starts = np.flatnonzero(np.diff(rows, prepend=-1))  # where each wave row's lines begin
        ends = np.append(starts[1:], len(keys))
        for row, a, b in zip(rows[starts].tolist(), starts.tolist(), ends.tolist()):
            fp.setdefault((wgs[row], seg), []).append((step, lines[a:b]))  # (step, its lines): record() joins them

    def _lane_ends(self, addr, act):
        """(addresses, active) [n, 64, k] of an access -> only each lane's first and last element, when that
        names the same lines: every lane's elements span less than a line (so lie on the first's line or the
        next) and are all active or all not (a dwordx4's 4 addresses: half the work, same footprint)."""
        k = addr.shape[-1] if addr.dim() == 3 else 1
        if k <= 2 or not SHORTCUTS:
            return addr, act
        span = addr[..., -1] - addr[..., 0]
        if not bool(((span >= 0) & (span < (1 << self.line_shift))).all()):
            return addr, act
        if act is not None and not bool((act.all(-1) == act.any(-1)).all()):
            return addr, act
        ends = addr[..., ::k - 1]
        return ends, (None if act is None else act[..., ::k - 1])

    # ---- loops ----------------------------------------------------------------------------------------------
    # A loop is any taken backward branch, whatever its shape: a bottom test (s_cmp + s_cbranch_scc back), a
    # top or middle test with an unconditional s_branch back (LLVM's rotated loops), or out-of-line blocks
    # that branch back into the body (Triton's masked loads). Its trips repeat one pattern: each scalar
    # branch in the body is decided by an s_cmp of an SGPR that moves by a constant step against a fixed
    # value. The trip count is where the first such branch in the body changes its outcome.
    def _operand_values(self, g, pc):
        out = []
        for op in self.instrs[pc].operands:
            if isinstance(op, Reg) and op.kind == "s" and op.count == 1:
                out.append((op.index, int(self.m.sgpr[op.index, g.waves[0]])))
            elif isinstance(op, Const):
                out.append((None, op.value if op.kind != "float" else op.bits))
            else:
                return None
        return out

    def _scc_branch(self, g, pc, taken):
        st = self._loops(g)
        cmp_pc, values = self.last_cmp[g.waves[0]]
        st.log.append((pc, cmp_pc, values, taken))
        pending = st.pending.get(pc)
        if pending is not None:
            del st.pending[pc]
            slot, expected, markers = pending
            if values is None or dict(values).get(slot) != expected:
                # the moved counter did not reach the branch (it is recomputed from another register): the
                # loop runs on functionally, so its trips are not skipped
                for w, k in markers:
                    del self.streams[w][k]
                st.forwarded.pop(pc, None)
                st.running.pop(pc, None)
            elif taken != st.forwarded.get(pc, taken):
                del st.forwarded[pc]  # every trip but the last was skipped: this test ended the loop
                st.running.pop(pc, None)
        elif pc in st.forwarded and taken != st.forwarded[pc]:
            del st.forwarded[pc]  # the loop exited; its next run may be fast-forwarded again
            st.running.pop(pc, None)

    def _loops(self, g):
        return self.loops.setdefault(g.waves[0], _Loops())

    def _back_edge(self, g, pc, target):
        # a new loop iteration (a segment of the footprint) starts at a back edge, unless it branches into the
        # body of another loop seen taken (an inner loop, or an out-of-line block jumping back into the body)
        inner = any(q <= target <= p and (q, p) != (target, pc) for q, p in self.loop_ranges)
        self.loop_ranges.add((target, pc))
        if not inner:
            for w in g.waves:
                self.segment[w] = self.segment.get(w, 0) + 1
            executed = self.executed.get(g.waves[0], 0)
            if self.segment[g.waves[0]] >= 2 and executed - self.segment_start.get(g.waves[0], 0) >= LONG_TRIP \
                    and not self._has_inner_loop(target, pc):
                self.long_trips = True
            self.segment_start[g.waves[0]] = executed
        # one steady trip of an unrolled loop (LONG_TRIP) is enough for the L2 model
        stop_after = min(self.stop_after, 1) if self.stop_after is not None and self.long_trips else self.stop_after
        if stop_after is not None and len(self.segment) == self.m.W and min(self.segment.values()) > stop_after:
            raise StopRun()
        if not self.detail:
            return
        # each wave group loops on its own (waves that took other branches, e.g. a ping-pong kernel's halves)
        st = self._loops(g)
        n = st.trips.get(pc, 0) + 1
        st.trips[pc] = n
        marks = st.marks.setdefault(pc, [])
        marks.append(len(st.log))
        executed = self.executed.get(g.waves[0], 0)
        trip_len = executed - st.took.get(pc, executed)
        st.took[pc] = executed
        # one fast-forward per run of a loop: once its counter has been moved to the last trip, another of its
        # branches (aiter's FAv3 tests a tail-mask counter beside the trip counter) would count the same trips
        # again, trips the functional run never takes
        # (a trip made long by an inner loop's trips is not an unrolled body: those loops keep `detail` trips)
        long_trips = trip_len >= LONG_TRIP and not self._has_inner_loop(target, pc)
        if pc in st.running.values() or n < (max(2, self.detail // 2) if long_trips else self.detail):
            return
        if n >= 4:
            self._fast_forward(g, st, target, marks[-4:], pc, long_trips)
        elif long_trips:
            # an unrolled loop after 2 or 3 trips (LONG_TRIP): the first trip's branches are the log's entries
            # inside the loop just before its first back edge; two samples of the counter already give its step
            # (a wrong guess is caught at the next test, and the loop runs on)
            start = marks[-n]
            while start > 0 and target <= st.log[start - 1][0] <= pc:
                start -= 1
            self._fast_forward(g, st, target, [start] + marks[-n:], pc, long_trips)

    def _has_inner_loop(self, target, back_edge):
        """Whether another back edge taken so far lies inside the loop target..back_edge."""
        return any(target <= q and p <= back_edge and (q, p) != (target, back_edge) for q, p in self.loop_ranges)

    def _fast_forward(self, g, st, target, marks, back_edge, long_trips=False):
        trips = [st.log[a:b] for a, b in zip(marks, marks[1:])]  # the last trips' scalar branches (2 or 3)
        best = None
        for branch in {e[0] for e in trips[-1]} - set(st.forwarded):
            seen = [[e for e in trip if e[0] == branch] for trip in trips]
            if any(len(x) != 1 for x in seen):
                continue
            (_, cmp_pc, _, taken), = seen[-1]
            if any(x[0][1] != cmp_pc or x[0][3] != taken or x[0][2] is None for x in seen):
                continue
            if not self._leaves(branch, taken, target, back_edge):
                continue  # its other outcome stays in the loop (a tail-mask test): it does not end the loop
            left = self._trips_left(cmp_pc, [x[0][2] for x in seen], taken, self.instrs[branch].base)
            if left is not None and (best is None or left[0] < best[0]):
                best = (*left, branch, taken)
        if best is None:
            return
        remaining, slot, step, last, rule, branch, taken = best
        # `remaining` more back edges would be taken: skip all of them but the last trip
        # (an unrolled loop's trip is long enough to skip them all: the next trip is the last)
        keep = 0 if long_trips else 1
        waves = list(g.waves)
        # waves of several workgroups can loop in one group (the timing model records a few workgroups in one run,
        # e.g. five along a causal grid's x): each wave's own counter and bound give its trips left
        skips = self._skips_per_wave(waves, slot, last, rule, taken, remaining, keep)
        if max(skips) < 1:
            return
        now = self.m.sgpr[slot, waves]
        self.m.sgpr[slot, waves] = (now + torch.tensor(skips, dtype=now.dtype, device=now.device) * step) & 0xFFFFFFFF
        markers = []
        if self.first_chunk:
            for w, skip in zip(waves, skips):
                if w < len(self.streams) and skip:
                    markers.append((w, len(self.streams[w])))
                    self.streams[w].append(Skip(target, skip))
        st.forwarded[branch] = taken
        st.running[branch] = back_edge
        # the next test must see the first wave's counter `skip` steps further than the trip after the last one seen
        st.pending[branch] = (slot, (last + (skips[0] + 1) * step) & 0xFFFFFFFF, markers)

    def _skips_per_wave(self, waves, slot, last, rule, taken, remaining, keep):
        """Trips to skip per wave of the group, leaving `keep` trips to run: `remaining` - keep for the first wave
        (whose s_cmp values were logged); another wave's counter is where the first's is, shifted by their
        difference now, against its own bound."""
        first = max(0, remaining - keep)
        counters = self.m.sgpr[slot, waves].tolist()
        fixed_slot, fixed_value = rule[1]
        bounds = self.m.sgpr[fixed_slot, waves].tolist() if fixed_slot is not None else [fixed_value] * len(waves)
        if len(set(counters)) == 1 and len(set(bounds)) == 1:
            return [first] * len(waves)
        skips = []
        for c, b in zip(counters, bounds):
            at_cmp = (c - counters[0] + last) & 0xFFFFFFFF
            left = _count_trips(rule, at_cmp, b, taken)
            skips.append(max(0, left - keep) if left is not None else 0)
        return skips

    def _leaves(self, branch, taken, top, back_edge):
        """Whether the other outcome of `branch` (now `taken` or not) goes outside the loop's pcs top..back_edge."""
        if taken:
            other = branch + 1
        else:
            ins = self.instrs[branch]
            simm = ins.operands[0].value & 0xFFFF
            other = self.pc_of_addr.get(ins.addr + 4 + 4 * (simm - 0x10000 if simm & 0x8000 else simm))
        return other is None or not top <= other <= back_edge

    def _trips_left(self, cmp_pc, seen, taken, branch_base):
        """(more trips the branch keeps its outcome, counter SGPR, its step, its last value, the exit rule) or None:
        `seen` holds the s_cmp's operand values (SGPR index or None, value) in the last trips (2 or 3)."""
        parts = self.instrs[cmp_pc].base.split("_")  # s_cmp_lt_u32, s_cmpk_gt_i32
        if len(parts) != 4 or parts[2] not in _CMP or len(seen[0]) != 2:
            return None
        cols = [[trip[k][1] for trip in seen] for k in range(2)]
        steps = [{b - a for a, b in zip(col, col[1:])} for col in cols]
        moving = [k for k in range(2) if seen[0][k][0] is not None and len(steps[k]) == 1 and 0 not in steps[k]]
        fixed = [k for k in range(2) if len(set(cols[k])) == 1]
        if len(moving) != 1 or len(fixed) != 1:
            return None
        k, other = moving[0], fixed[0]
        step = cols[k][-1] - cols[k][-2]
        # (counter operand, (bound SGPR or None, bound value), step, predicate, signed, branch on scc1?)
        rule = (k, (seen[0][other][0], cols[other][0]), step, _CMP[parts[2]], parts[3].startswith("i"),
                branch_base.endswith("scc1"))
        left = _count_trips(rule, cols[k][-1], cols[other][0], taken)
        return None if left is None else (left, seen[0][k][0], step, cols[k][-1], rule)


def _count_trips(rule, counter, bound, taken):
    """More trips before the branch's outcome changes from `taken`, from the counter's value at the last s_cmp."""
    k, _, step, pred, signed, when_true = rule

    def outcome(c):
        a, b = (c, bound) if k == 0 else (bound, c)
        return pred(_as_int(a, signed), _as_int(b, signed)) == when_true

    remaining, c = 0, counter
    while remaining < MAX_TRIPS:
        c = (c + step) & 0xFFFFFFFF
        if outcome(c) != taken:
            return remaining
        remaining += 1
    return None


@dataclass
class _Loops:
    """One wave group's loop bookkeeping for fast-forward."""

    trips: dict = field(default_factory=dict)  # back-edge pc -> trips taken in the current run of the loop
    log: list = field(default_factory=list)  # (branch pc, s_cmp pc, operand values, taken?) of each s_cbranch_scc*
    marks: dict = field(default_factory=dict)  # back-edge pc -> len(log) at each take
    forwarded: dict = field(default_factory=dict)  # exit branch of a fast-forwarded loop -> its outcome meanwhile
    pending: dict = field(default_factory=dict)  # exit branch -> (counter SGPR, value due at its next test, markers)
    running: dict = field(default_factory=dict)  # exit branch of a fast-forwarded loop -> the loop's back-edge pc
    took: dict = field(default_factory=dict)  # back-edge pc -> the group's instruction count at its last take


def _as_int(v, signed):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if signed and v & 0x80000000 else v


_WHAT = "tilegcn timing: the functional run that feeds the timing model"

# the functional runs' shortcuts for speed, none of which changes the trace: lazy memory (the arguments' pages
# staged on first touch, no stores written back), LDS DMAs moving no bytes in the footprint run (which reads no
# LDS), footprints from each lane's first and last element (Tracer._lane_ends). False: the full runs (a test
# checks both give the same estimate)
SHORTCUTS = True


def record(module, name, launch_args, wgs, detail_iterations=4, line_bytes=128, detailed=None) -> Trace:
    """Two functional runs with the trace hook (`launch_args`: Module.prepare's keyword arguments):
    - the detailed workgroups (`detailed`, default `wgs[:1]`), exactly (check=False), for the wave streams: they
      run as one chunk, so workgroups that take the same path share the emulator's work;
    - all of `wgs` (one XCD's workgroups of a round) for their L2 footprints. This run skips MFMA math, LDS
      accesses and the bytes LDS DMAs move (their values cannot change the addresses of GEMM-like kernels;
      the DMAs' addresses are still checked and traced) and stops once every
      wave is past the iterations it records, so it costs a few loop trips of address arithmetic.
    Both run on lazy memory: only the pages of the arguments they touch are staged, and their stores are not
    written back into the caller's tensors (an estimate leaves its arguments as they were).
    """
    detailed = list(detailed or wgs[:1])
    machine = traced_machine(module, name, launch_args, detailed, lazy_memory=SHORTCUTS)
    tracer = Tracer(machine, module.instrs, detail_iterations, line_bytes, footprint_segments=(),
                    detailed=len(detailed))
    run_traced(machine, tracer, _WHAT)
    if machine.chunk_size < len(detailed):
        raise RuntimeError("tilegcn timing: the detailed workgroups did not fit one emulator chunk")
    program = machine.prog
    # the machine's copy of the arguments' memory goes before the next run's (1 GiB each at attention's sizes)
    tracer.m = machine = None
    machine = traced_machine(module, name, launch_args, wgs, _addresses_only, lazy_memory=SHORTCUTS)
    machine.lds_dma_data = not SHORTCUTS  # it reads no LDS: global -> LDS DMAs only need their addresses
    foot = Tracer(machine, module.instrs, 0, line_bytes)
    foot.first_chunk = False
    foot.stop_after = max(foot.segs_wanted)
    run_traced(machine, foot, _WHAT)
    footprints = {key: _joined(parts) for key, parts in foot.footprints.items()}
    wpw = tracer.wpw
    samples = [tracer.streams[k * wpw:(k + 1) * wpw] for k in range(len(detailed))]
    return Trace(program, samples[0], footprints, samples)


def _joined(parts):
    """[(step, lines)] of one workgroup and segment -> (steps, lines) arrays, each line beside its step."""
    lines = [p[1] for p in parts]
    steps = np.repeat(np.array([p[0] for p in parts], np.int64), [len(x) for x in lines])
    return steps, np.concatenate(lines)


# DS instructions that exchange lanes without touching LDS: they compute register values (Triton's gfx950 MX
# kernels route global addresses through ds_bpermute_b32), so the footprint run must execute them
_LANE_EXCHANGES = ("ds_bpermute_b32", "ds_permute_b32", "ds_swizzle_b32")


def _addresses_only(handlers):
    """The handlers of a footprint run: MFMAs and LDS reads / writes skipped for speed (an address read back from
    LDS would be left unwritten), lane exchanges kept."""
    out = []
    for h in handlers:
        if h.cls == "mfma" or h.cls == "ds" and h.mnemonic not in _LANE_EXCHANGES:
            h = copy.copy(h)
            h.run = _nothing
        out.append(h)
    return out


def _nothing(g):
    pass
