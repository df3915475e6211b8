"""The scheduler of the emulated device: waves, groups of waves, counters, barriers, hazard checks.

Waves that sit at the same PC run together as one *group*: every instruction executes once for all of
the group's waves and all 64 lanes as torch operations on [waves, 64] slabs of the register files
(VGPRs int32 [regs, waves, 64]; SGPRs int64 [128 slots, waves] holding 32-bit values). A branch whose
condition differs between the waves of a group splits it; groups that reach the same PC merge again
(the scheduler runs the group with the lowest PC, so a split group reconverges after an `if`).
`s_barrier` parks a group; when no group can run, every workgroup whose live waves are all parked
passes the barrier and its LDS race epoch advances.

Lowest-PC-first alone would starve a group that is ahead of a loop: a spin lock's holder never runs
again while the waiters loop below it. So scheduling is also fair, as hardware arbitration is: a group
that *spins* (at a backward branch its registers are what they were at an earlier pass through the same
branch target) yields to any group that does not, and a group that ran QUANTUM steps while others could
run hands over to the one that waited longest. When every running group spins and global memory and
LDS stay unchanged over a full round of observations, nothing can ever change again: the launch stops
with an error naming the spinning waves (instead of running out $TILEGCN_EMULATOR_MAX_STEPS).

Asynchrony is strict. A VMEM op (loads, stores, LDS DMA) enters the wave's vmcnt queue and a DS or
SMEM op its lgkmcnt queue; nothing it does is visible until an `s_waitcnt` retires it: then it reads
or writes memory and its destination registers, in issue order. VMEM and DS retire in order; SMEM
returns out of order, so only lgkmcnt(0) retires it. Between issue and retirement, touching a
destination register (read, or write) is a HazardError. MFMA results need the arch's wait states
(`Arch.every_mfma_hazard`); each issued instruction counts one, `s_nop N` counts N + 1.

Queue entries and hazard records remember which waves they belong to (None = all waves of the group),
so splitting and merging groups never loses or invents a wave's outstanding work.
"""
from __future__ import annotations

import os
import time

import torch

from ...errors import EmulatorError, HazardError, RaceError
from .decode import EXEC_HI, EXEC_LO, M0, MODE_SLOT
from .ops_mode import initial_mode
from .state import Fault, GlobalMemory, Lds, M32
from .stats import LaunchStats
from .valu_hazards import check as check_recent_writes

RUN, PARKED, DONE = 0, 1, 2
# Fair scheduling (see the module doc): steps a group runs before its first spin check, the most steps it
# may run while other groups wait, the longest gap between two looks at one group (so a spin that starts
# late is still found within seconds) and between two rounds, and how many branch targets' snapshots a
# group keeps.
WATCH_AFTER = 64
QUANTUM = 2_000
MAX_INTERVAL = 1 << 16
MAX_ROUND_GAP = 1 << 14
SNAPSHOTS_KEPT = 4
DEFAULT_MAX_STEPS = 5_000_000
LANE_BITS = torch.tensor([1 << i if i < 63 else -(1 << 63) for i in range(64)], dtype=torch.int64)
LANE_SHIFTS = torch.arange(64, dtype=torch.int64)
_ERRORS = {"EmulatorError": EmulatorError, "HazardError": HazardError, "RaceError": RaceError}


class Entry:
    """One outstanding memory operation of a group (for some or all of its waves)."""

    __slots__ = ("seq", "kind", "waves", "issue_waves", "vregs", "sregs", "apply", "pc")

    def __init__(self, seq, kind, issue_waves, vregs, sregs, apply, pc):
        self.seq, self.kind, self.issue_waves = seq, kind, issue_waves
        self.waves = None  # None: every wave it was issued for that is still in the owning group
        self.vregs, self.sregs, self.apply, self.pc = vregs, sregs, apply, pc

    def restricted(self, waveset):
        """A copy pending only for the waves of `waveset` (None if it has none of them)."""
        mine = (frozenset(self.issue_waves) if self.waves is None else self.waves) & waveset
        if not mine:
            return None
        e = Entry(self.seq, self.kind, self.issue_waves, self.vregs, self.sregs, self.apply, self.pc)
        e.waves = None if len(mine) == len(self.issue_waves) else mine
        return e

    def positions(self, waves, device):
        """Row positions (within the issuing group's rows) of `waves` (None: all pending), or None = all rows."""
        want = self.waves if waves is None else waves
        if want is None or len(want) == len(self.issue_waves):
            return None
        return torch.tensor([i for i, w in enumerate(self.issue_waves) if w in want], dtype=torch.int64,
                            device=device)


class Group:
    """Waves at one PC, executed together."""

    def __init__(self, m, waves, pc):
        self.m = m
        self.waves = tuple(waves)
        self.waveset = frozenset(self.waves)
        self.n = len(self.waves)
        lo, hi = self.waves[0], self.waves[-1]
        if hi - lo + 1 == self.n:
            self.sel = slice(lo, hi + 1)
            self.V = m.vgpr[:, lo:hi + 1]
            self.S = m.sgpr[:, lo:hi + 1]
        else:
            self.sel = torch.tensor(self.waves, dtype=torch.int64, device=m.device)
            self.V = self.S = None
        self.pc = pc
        self.state = RUN
        self.vmq, self.lgkmq = [], []
        self.pend_v, self.pend_s = {}, {}
        self.t = 0  # wait states issued so far
        self.mfma_recs = []  # [t_end, dst set, src_c range, passes, pc, waves]
        self.valu_recs = []  # [t_end, written vgpr set, pc, waves]
        self._exec = None
        self.masks = {}  # SGPR pair slot -> bool [n, 64] lane mask last written by a VALU op
        self.m0_t = -(1 << 30)  # wait-state count when M0 was last written (LDS DMA reads M0)
        # fairness and spin detection (Machine._watch): when to look next (a steps_left value), the gap to
        # the look after, branch target -> (round, state) seen there, and whether the group spins
        self.watch_at = m.steps_left - WATCH_AFTER
        self.interval = WATCH_AFTER
        self.snaps = {}
        self.spinning = False
        self.spin_round = -1
        self.spin_at = None  # (branch pc, target pc) of the loop it spins in
        self.last_run = m.clock  # schedule turn it last ran in (or was made in)

    # ---- vector registers -------------------------------------------------------------------
    def rv(self, r):
        V = self.V
        return V[r] if V is not None else self.m.vgpr[r].index_select(0, self.sel)

    def rvs(self, r, k):
        V = self.V
        return V[r:r + k] if V is not None else self.m.vgpr[r:r + k].index_select(1, self.sel)

    def wv(self, r, val, mask=False):
        """Write VGPR r in the EXEC-active lanes (or in `mask` when given)."""
        if mask is False:
            mask = self.exec_mask()
        if not isinstance(val, torch.Tensor):
            val = torch.tensor(_s32(val), dtype=torch.int32, device=self.m.device)
        V = self.V
        if V is not None:
            dst = V[r]
            dst.copy_(val if mask is None else torch.where(mask, val, dst))
        else:
            old = self.m.vgpr[r].index_select(0, self.sel)
            new = val.expand(self.n, 64) if mask is None else torch.where(mask, val, old)
            self.m.vgpr[r].index_copy_(0, self.sel, new.contiguous())

    def wvs(self, r, vals, mask=False):
        """Write VGPRs r..r+k-1 from int32 [k, n, 64]."""
        if mask is False:
            mask = self.exec_mask()
        k = vals.shape[0]
        V = self.V
        if V is not None:
            dst = V[r:r + k]
            dst.copy_(vals if mask is None else torch.where(mask, vals, dst))
        else:
            old = self.m.vgpr[r:r + k].index_select(1, self.sel)
            new = vals.expand(k, self.n, 64) if mask is None else torch.where(mask, vals, old)
            self.m.vgpr[r:r + k].index_copy_(1, self.sel, new.contiguous())

    # ---- scalar registers -------------------------------------------------------------------
    def rs(self, slot):
        S = self.S
        return S[slot] if S is not None else self.m.sgpr[slot].index_select(0, self.sel)

    def ws(self, slot, val):
        S = self.S
        if S is not None:
            if isinstance(val, torch.Tensor):
                S[slot].copy_(val)
            else:
                S[slot].fill_(val & M32)
        else:
            if not isinstance(val, torch.Tensor):
                val = torch.full((self.n,), val & M32, dtype=torch.int64, device=self.m.device)
            self.m.sgpr[slot].index_copy_(0, self.sel, val.expand(self.n).contiguous())
        if slot >= EXEC_LO:
            self._exec = None
        elif slot == M0:
            self.m0_t = self.t
        if self.masks:
            self.masks.pop(slot & ~1, None)

    def rs64(self, slot):
        return self.rs(slot) | (self.rs(slot + 1) << 32)

    def ws64(self, slot, val):
        if isinstance(val, torch.Tensor):
            self.ws(slot, val & M32)
            self.ws(slot + 1, (val >> 32) & M32)
        else:
            self.ws(slot, val & M32)
            self.ws(slot + 1, (val >> 32) & M32)

    def rscc(self):
        return self.m.scc[self.sel]

    def wscc(self, val):
        if isinstance(val, torch.Tensor):
            self.m.scc[self.sel] = val
        else:
            self.m.scc[self.sel] = bool(val)

    # ---- lane masks ---------------------------------------------------------------------------
    def exec_mask(self):
        """bool [n, 64] of EXEC, or None when every lane of every wave is on."""
        e = self._exec
        if e is None:
            e = self._exec = self._compute_exec()
        return e[0]

    def exec_active(self):
        e = self._exec
        if e is None:
            e = self._exec = self._compute_exec()
        return e[1]

    def _compute_exec(self):
        lo, hi = self.rs(EXEC_LO), self.rs(EXEC_HI)
        if bool(((lo & hi) == M32).all()):
            return (None, self.n * 64)
        mask = bits_to_lanes(lo, hi)
        return (mask, int(mask.sum()))

    def lanemask(self, slot):
        """bool [n, 64] of the 64-bit lane mask in SGPR pair `slot`."""
        cached = self.masks.get(slot)
        if cached is not None:
            return cached
        return bits_to_lanes(self.rs(slot), self.rs(slot + 1))

    def wlanemask(self, slot, mask):
        """Write a bool [n, 64] lane mask into SGPR pair `slot` (and remember it unpacked)."""
        bits = (mask.to(torch.int64) * LANE_BITS.to(mask.device)).sum(1)
        self.ws(slot, bits & M32)
        self.ws(slot + 1, (bits >> 32) & M32)
        if slot != EXEC_LO:
            self.masks[slot] = mask

    def row_of(self, wave):
        return self.waves.index(wave)


def bits_to_lanes(lo, hi):
    bits = (lo & M32) | (hi << 32)
    return ((bits.unsqueeze(1) >> LANE_SHIFTS.to(bits.device)) & 1).bool()


def _s32(v: int) -> int:
    v &= M32
    return v - (1 << 32) if v & 0x80000000 else v


class Machine:
    """Runs one launch of a bound program (see `program.py`)."""

    MAX_CHUNK_VGPR_BYTES = 96 << 20
    MAX_CHUNK_LDS_BYTES = 192 << 20

    def __init__(self, prog, grid, block, dispatch, tensors: list, check: bool, device, lazy_memory=False):
        self.prog = prog
        self.kd = prog.descriptor
        self.arch = prog.arch
        self.grid, self.block = grid, block
        self.check = check
        self.device = device
        self.threads = block[0] * block[1] * block[2]
        if self.threads < 1 or self.threads > self.arch.max_workgroup_threads:
            raise EmulatorError(f"tilegcn emulator: kernel {prog.name!r}: block {block} has {self.threads} threads; "
                                f"{self.arch.name} allows 1..{self.arch.max_workgroup_threads}")
        maxwg = prog.metadata.get(".max_flat_workgroup_size")
        if maxwg and self.threads > maxwg:
            raise EmulatorError(f"tilegcn emulator: kernel {prog.name!r}: block {block} has {self.threads} threads, "
                                f"more than its .max_flat_workgroup_size {maxwg}")
        self.waves_per_wg = -(-self.threads // 64)
        self._check_registers_fit(prog.name)
        self.lds_size = dispatch.lds_size  # the descriptor's fixed size + the launch's dynamic shared_mem
        if self.lds_size > self.arch.lds_bytes:
            raise EmulatorError(f"tilegcn emulator: kernel {prog.name!r} asks for {self.lds_size} bytes of LDS "
                                f"({self.kd.group_segment_fixed_size} fixed + {self.lds_size - self.kd.group_segment_fixed_size} "
                                f"dynamic); {self.arch.name} has {self.arch.lds_bytes} per workgroup")
        self.user_sgprs = dispatch.user_sgprs
        self.mem = GlobalMemory(tensors, dispatch.segments, device, lazy_memory)
        self.stats = LaunchStats(kernel=prog.name, arch=self.arch.name, grid=tuple(grid), block=tuple(block))
        self.counts = [0] * len(prog.handlers)
        self.seq = 0
        # a kernel that never ends (a loop whose exit condition never holds) stops with an error instead
        self.steps_left = _max_steps()
        self.clock = 0  # schedule turns taken (Group.last_run)
        self.rotate = False  # the last group ran out its QUANTUM: next, the one that waited longest runs
        hz = self.mfma_hz = self.arch.every_mfma_hazard
        self.mfma_window = max(list(hz.vdst_to_read.values()) + list(hz.vdst_to_srcc_overlap.values()) + [0])
        # VALU writes only matter as MFMA sources: skip their bookkeeping in programs without MFMAs
        self.valu_window = hz.valu_write_to_mfma_src if prog.recent.mfma_present else 0
        # ... and to the VALU-side rules (valu_hazards.py): keep as many records as the longest rule's wait states
        # (each record is >= 1), none in programs with neither
        self.valu_keep = max(self.valu_window, prog.recent.window)
        # optional observer (the timing model's trace): step(group, handler, pc) after each instruction, plus
        # global_access / ds_conflicts calls from the memory handlers; None costs one test per step
        self.tracer = None
        self.wg_subset = None  # linear workgroup ids to run (None: the whole grid)
        # False: LDS DMAs check and translate their addresses but move no bytes (a traced run that reads no LDS)
        self.lds_dma_data = True

    # ------------------------------------------------------------------------------------------
    def _check_registers_fit(self, name):
        """A GPU refuses a launch whose workgroup cannot be resident on one CU: its waves spread over the CU's
        SIMDs, and each SIMD's register file holds only so many waves of the descriptor's VGPR+AGPR count."""
        regs = self.kd.vgpr_count
        fits = self.arch.simds_per_cu * self.arch.waves_per_simd(regs)
        if self.waves_per_wg > fits:
            raise EmulatorError(
                f"tilegcn emulator: kernel {name!r} holds {regs} VGPRs+AGPRs per wave (kernel descriptor), so a "
                f"{self.arch.name} CU fits {fits} of its waves ({self.arch.waves_per_simd(regs)} per SIMD); its "
                f"workgroup of {self.threads} threads has {self.waves_per_wg}: the launch would fail on a GPU "
                f"(out of resources)")

    def run(self) -> LaunchStats:
        start = time.perf_counter()
        gx, gy, gz = self.grid
        n_wg = gx * gy * gz
        per_wg_vgpr = self.waves_per_wg * self.kd.vgpr_count * 64 * 4
        per_wg_lds = max(self.lds_size, 16) * (2 + (6 if self.check else 0))
        chunk = max(1, min(self.MAX_CHUNK_VGPR_BYTES // max(per_wg_vgpr, 1),
                           self.MAX_CHUNK_LDS_BYTES // per_wg_lds, 4096 // self.waves_per_wg or 1))
        ids = range(n_wg) if self.wg_subset is None else list(self.wg_subset)
        self.chunk_size = min(chunk, len(ids))
        try:
            for first in range(0, len(ids), chunk):
                self._run_chunk(ids[first:first + chunk])
        finally:
            self.mem.finish()
        self._finish_stats(n_wg)
        self.stats.seconds = time.perf_counter() - start
        return self.stats

    def _finish_stats(self, n_wg):
        st = self.stats
        st.workgroups, st.waves = n_wg, n_wg * self.waves_per_wg
        st.instructions = {}
        for h, c in zip(self.prog.handlers, self.counts):
            if c:
                st.instructions[h.cls] = st.instructions.get(h.cls, 0) + c
                st.by_mnemonic[h.mnemonic] = st.by_mnemonic.get(h.mnemonic, 0) + c

    # ---- initial state ----------------------------------------------------------------------------
    def _run_chunk(self, wg_linear: list):
        kd, dev = self.kd, self.device
        gx, gy, _ = self.grid
        wpw = self.waves_per_wg
        W = len(wg_linear) * wpw
        self.W = W
        self.chunk_wgs = wg_linear
        self.vgpr = torch.zeros((self.kd.vgpr_count, W, 64), dtype=torch.int32, device=dev)
        self.sgpr = torch.zeros((128, W), dtype=torch.int64, device=dev)
        self.scc = torch.zeros(W, dtype=torch.bool, device=dev)
        self.wg_ids = [(l % gx, (l // gx) % gy, l // (gx * gy)) for l in wg_linear]
        self.wave_wg = torch.arange(W, device=dev) // wpw  # chunk-local workgroup of each wave
        self.wave_in_wg = torch.arange(W, device=dev) % wpw
        self.lds = Lds(len(wg_linear), self.lds_size, dev, self.check and self.prog.uses_lds)
        self.lds_base = (self.wave_wg * self.lds.stride)  # flat LDS index of each wave's workgroup
        # v0: packed work-item ids; EXEC: the lanes that exist
        bx, by, _ = self.block
        t = (self.wave_in_wg.view(W, 1) * 64 + torch.arange(64, device=dev).view(1, 64))
        exists = t < self.threads
        mode = kd.workitem_id_mode
        x = t % bx
        y = (t // bx) % by if mode >= 1 else torch.zeros_like(t)
        z = t // (bx * by) if mode >= 2 else torch.zeros_like(t)
        self.vgpr[0] = torch.where(exists, x | (y << 10) | (z << 20), 0).to(torch.int32)
        exec_bits = (exists.to(torch.int64) * LANE_BITS.to(dev)).sum(1)
        self.sgpr[EXEC_LO] = exec_bits & M32
        self.sgpr[EXEC_HI] = (exec_bits >> 32) & M32
        self.sgpr[MODE_SLOT] = initial_mode(kd)
        for name, first, count in kd.user_sgpr_layout():
            for i, word in enumerate(self.user_sgprs.get(name, [])[:count]):
                self.sgpr[first + i] = word
        ids = torch.tensor(self.wg_ids, dtype=torch.int64, device=dev).repeat_interleave(wpw, dim=0)
        for name, slot in kd.system_sgpr_layout():
            if name.startswith("workgroup_id_"):
                self.sgpr[slot] = ids[:, "xyz".index(name[-1])]
            elif name == "workgroup_info":
                self.sgpr[slot] = wpw  # number of waves in the workgroup
        self.round, self.memory_seen, self.round_gap = 0, None, 0  # spin detection: see _every_group_spins
        self.groups = [Group(self, list(range(W)), self.prog.entry_index)]
        self._schedule()

    # ---- scheduling -----------------------------------------------------------------------------
    def _schedule(self):
        while True:
            runnable = [g for g in self.groups if g.state == RUN]
            if not runnable:
                parked = [g for g in self.groups if g.state == PARKED]
                if not parked:
                    return
                self._pass_barrier(parked)
                continue
            ready = [g for g in runnable if not g.spinning]
            if not ready:
                ready = self._every_group_spins(runnable)
                if not ready:  # a barrier passed
                    continue
            if self.rotate:
                self.rotate = False
                g = min(ready, key=lambda x: x.last_run)
            else:
                g = min(ready, key=lambda x: x.pc)
            same = [h for h in runnable if h is not g and h.pc == g.pc]
            if same:
                g = self._merge([g] + same)
                continue
            # run up to the next group ahead (to merge with it there); a spinning group behind waits
            limit = min([h.pc for h in runnable if h.pc > g.pc], default=1 << 62)
            self.clock += 1
            g.last_run = self.clock
            self._run(g, limit, QUANTUM if len(runnable) > 1 else 0)
            self.groups = [h for h in self.groups if h.state != DONE]

    def _pass_barrier(self, parked):
        wgs = sorted({w // self.waves_per_wg for g in parked for w in g.waves})
        self.lds.new_epoch(wgs)
        for g in parked:
            g.state = RUN

    def _run(self, g, limit, quantum=0):
        """Execute `g` until it parks, ends, splits, passes `limit` (the next group's PC), spins, or has run
        `quantum` steps (0: no limit; given when other groups wait)."""
        handlers = self.prog.handlers
        counts = self.counts
        check = self.check
        stats = self.stats
        tracer = self.tracer
        recent_checks, recent_tracked = self.prog.recent.checks, self.prog.recent.tracked
        floor = max(0, self.steps_left - quantum) if quantum else 0
        try:
            while g.state == RUN:
                pc = g.pc
                if pc >= limit:
                    return
                h = handlers[pc]
                g.pc = pc + 1
                self.current_pc = pc
                self.steps_left -= 1
                if self.steps_left < floor:
                    if floor:  # its turn is over: the others run before it goes on here
                        g.pc, self.steps_left, self.rotate = pc, self.steps_left + 1, True
                        return
                    raise Fault("the launch exceeded $TILEGCN_EMULATOR_MAX_STEPS instruction steps (one step runs "
                                "an instruction for a group of waves); does a loop never exit?", 0)
                if check:
                    if g.pend_v and not g.pend_v.keys().isdisjoint(h.vrw):
                        self._register_hazard(g, h, vector=True)
                    if g.pend_s and not g.pend_s.keys().isdisjoint(h.srw):
                        self._register_hazard(g, h, vector=False)
                    if g.mfma_recs or (h.mfma is not None and g.valu_recs):
                        self._mfma_hazards(g, h)
                    if recent_checks[pc] and (g.valu_recs or g.mfma_recs):
                        check_recent_writes(self, g, h, pc)
                if h.vector:
                    stats.lane_instructions += g.exec_active()
                g.t += h.ws
                counts[pc] += g.n
                h.run(g)
                if tracer is not None:
                    tracer.step(g, h, pc)
                if recent_tracked[pc]:
                    g.valu_recs.append([g.t, h.vw, pc, None])
                    if len(g.valu_recs) > self.valu_keep:
                        del g.valu_recs[0]
                if g.state == "split":
                    return
                if g.pc <= pc and self.steps_left <= g.watch_at and self._watch(g, pc):
                    return
        except Fault as f:
            raise self._error(g, f, handlers[g.pc - 1]) from None

    # ---- fairness and spin detection ----------------------------------------------------------------
    def _watch(self, g, branch_pc) -> bool:
        """`g` just branched back from `branch_pc`. True when it spins: its registers, SCC and queues are
        what they were the last time it branched to this target (in this round). Between looks the gap
        doubles while the group keeps changing, so a long loop costs a few dozen snapshots."""
        target = g.pc
        state = self._group_state(g)
        old = g.snaps.get(target)
        if old is not None and old[0] == self.round:
            if _same_state(old[1], state):
                g.spinning, g.spin_round, g.spin_at = True, self.round, (branch_pc, target)
                return True
            g.interval = min(2 * g.interval, MAX_INTERVAL)
            g.watch_at = self.steps_left - g.interval
        else:
            g.watch_at = self.steps_left  # compare at the next pass
        g.snaps.pop(target, None)
        g.snaps[target] = (self.round, state)
        if len(g.snaps) > SNAPSHOTS_KEPT:
            del g.snaps[next(iter(g.snaps))]
        return False

    def _group_state(self, g):
        if g.V is not None:
            regs = (g.V.clone(), g.S.clone(), self.scc[g.sel].clone())
        else:
            regs = (self.vgpr.index_select(1, g.sel), self.sgpr.index_select(1, g.sel), self.scc[g.sel])
        return (len(g.vmq), len(g.lgkmq)) + regs

    def _every_group_spins(self, runnable) -> list:
        """Every running group spins. Release the barriers that only wait for parked waves; else, when
        each was seen spinning since the last round began and memory is what it was then, nothing can
        ever change: error. Otherwise begin a new round (remember memory; look at every group again) and
        return the groups to run."""
        released = self._complete_barriers()
        if released:
            return []
        memory = (self.mem.flat, self.lds.data)
        if self.memory_seen is not None and all(g.spin_round == self.round for g in runnable) and \
                all(torch.equal(a, b) for a, b in zip(memory, self.memory_seen)):
            raise self._spin_error(runnable)
        if self.memory_seen is not None:  # memory moved on: rounds (a copy of memory each) grow rarer
            self.round_gap = min(max(1, 2 * self.round_gap), MAX_ROUND_GAP)
        self.round += 1
        self.memory_seen = tuple(t.clone() for t in memory)
        for g in runnable:
            g.spinning = False
            g.watch_at = self.steps_left - self.round_gap
        return runnable

    def _complete_barriers(self) -> bool:
        """Pass the barrier of every workgroup whose live waves are all parked while other workgroups' waves
        still run. A parked group may hold waves of both kinds (groups at one pc merge): it splits."""
        wpw = self.waves_per_wg
        running = {w // wpw for g in self.groups if g.state == RUN for w in g.waves}
        parked = [g for g in self.groups if g.state == PARKED]
        passing = {w // wpw for g in parked for w in g.waves} - running
        if not passing:
            return False
        self.lds.new_epoch(sorted(passing))
        for g in parked:
            go = [w for w in g.waves if w // wpw in passing]
            if len(go) == g.n:
                g.state = RUN
            elif go:
                stay = self._subgroup(g, [w for w in g.waves if w // wpw not in passing], g.pc)
                stay.state = PARKED
                self.groups = [x for x in self.groups if x is not g] + [self._subgroup(g, go, g.pc), stay]
        return True

    def _spin_error(self, runnable):
        lines = []
        for g in sorted(runnable, key=lambda x: x.waves[0]):
            branch, target = g.spin_at
            h, t = self.prog.handlers[branch], self.prog.handlers[target]
            lines.append(f"{self._wave_names(g.waves)} spin(s) in the loop from pc 0x{t.addr:x} to `{h.text}` at "
                         f"pc 0x{h.addr:x}")
        parked = [g for g in self.groups if g.state == PARKED]
        for g in parked:
            h = self.prog.handlers[g.pc - 1]
            lines.append(f"{self._wave_names(g.waves)} wait(s) at `{h.text}` (pc 0x{h.addr:x})")
        if self.chunk_size < self.grid[0] * self.grid[1] * self.grid[2]:
            lines.append(f"(the emulator runs {self.chunk_size} workgroups at a time: a wave that waits for a "
                         f"workgroup of a later batch waits forever, as on a GPU that cannot hold the whole grid)")
        return EmulatorError(
            f"tilegcn emulator: kernel {self.prog.name!r} hangs: every wave still running loops without changing "
            f"its registers, and global memory and LDS stay unchanged (a spin-wait on something no wave will "
            f"set):\n  " + "\n  ".join(lines))

    def _wave_names(self, waves, most=8):
        names = [self.wave_name(w) for w in waves[:most]]
        if len(waves) > most:
            names.append(f"and {len(waves) - most} more waves")
        return ", ".join(names)

    # ---- errors -----------------------------------------------------------------------------------
    def wave_name(self, wave):
        wg = self.wg_ids[wave // self.waves_per_wg]
        return f"wave {wave % self.waves_per_wg} of workgroup {wg}"

    def _error(self, g, f: Fault, h):
        if f.pc is not None and f.pc != h.index:
            # the fault belongs to a memory op that the current instruction (s_waitcnt / s_endpgm) retired
            done = self.prog.handlers[f.pc]
            f.message += f" (found when `{h.text}` at pc 0x{h.addr:x} retired it)"
            h = done
        parts = [f"tilegcn emulator: kernel {self.prog.name!r}, pc 0x{h.addr:x} `{h.text}`"]
        if f.row is not None:
            wave = f.row if f.global_wave else g.waves[f.row]
            where = self.wave_name(wave)
            if f.lane is not None:
                where += f", lane {f.lane}"
            parts.append(where)
        return _ERRORS[f.kind](": ".join(parts) + ": " + f.message)

    # ---- hazards -------------------------------------------------------------------------------------
    def _register_hazard(self, g, h, vector):
        """A register `h` touches is the destination of an outstanding load. That is a hazard unless `h` is
        a load of the same in-order queue that only writes (or d16-merges into) it when it retires: then
        the earlier load's result lands first, as on the hardware."""
        pend = g.pend_v if vector else g.pend_s
        now = (h.vr | h.vw) if vector else (h.sr | h.sw)
        for reg in sorted((h.vrw if vector else h.srw) & pend.keys()):
            producers = [e for e in g.vmq + g.lgkmq if reg in (e.vregs if vector else e.sregs)]
            if reg not in now and h.queue in ("vm", "ds") and all(e.kind == h.queue for e in producers):
                continue
            e = producers[0]
            wave = min(e.waves) if e.waves is not None else e.issue_waves[0]
            producer = self.prog.handlers[e.pc]
            what = "reads" if reg in (h.vr if vector else h.sr) else "overwrites"
            name = self.prog.reg_name(reg) if vector else self.prog.sreg_name(reg)
            raise Fault(f"{what} {name} while `{producer.text}` (pc 0x{producer.addr:x}) that writes it is "
                        f"still in flight; wait for it with s_waitcnt first", wave, None, "HazardError",
                        global_wave=True)

    def scalar_written(self, first, count):
        """SGPRs written outside Group.ws (a scalar load retiring): drop the groups' cached lane masks."""
        for grp in self.groups:
            if first <= EXEC_HI and first + count > EXEC_LO:
                grp._exec = None
            for slot in range(first & ~1, first + count, 2):
                grp.masks.pop(slot, None)

    def _mfma_hazards(self, g, h):
        hz = self.mfma_hz
        t = g.t
        keep = []
        for rec in g.mfma_recs:
            t_end, dst, dst_range, passes, pc, waves = rec
            elapsed = t - t_end
            if elapsed >= self.mfma_window:
                continue
            keep.append(rec)
            need, why = 0, None
            if h.mfma is not None:
                info = h.mfma
                if not dst.isdisjoint(info.ab):
                    need, why = hz.vdst_to_read[passes], "reads as MFMA srcA/srcB"
                elif info.c_range is not None and not dst.isdisjoint(info.c):
                    if info.c_range != dst_range:
                        need, why = hz.vdst_to_srcc_overlap[passes], "reads as srcC (partially overlapping)"
            elif h.hazard_reads_mfma and not dst.isdisjoint(h.vr):
                need, why = hz.vdst_to_read[passes], "reads"
            if elapsed < need:
                producer = self.prog.handlers[pc]
                wave = min(waves) if waves is not None else g.waves[0]
                pipe = f"{passes} passes" if isinstance(passes, int) else f"{passes[1]} passes, non-XDL"
                raise Fault(f"{why} the result of `{producer.text}` (pc 0x{producer.addr:x}, {pipe}) after "
                            f"{elapsed} wait states; {self.arch.name} needs {need} (add s_nop)", wave, None,
                            "HazardError", global_wave=True)
        g.mfma_recs = keep
        if h.mfma is not None and g.valu_recs:
            need = self.valu_window
            for t_end, vw, pc, waves in g.valu_recs:
                elapsed = t - t_end
                if elapsed < need and not vw.isdisjoint(h.mfma.srcs):
                    producer = self.prog.handlers[pc]
                    wave = min(waves) if waves is not None else g.waves[0]
                    raise Fault(f"reads as MFMA source a register `{producer.text}` (pc 0x{producer.addr:x}) wrote "
                                f"{elapsed} wait states ago; {self.arch.name} needs {need} (add s_nop)", wave, None,
                                "HazardError", global_wave=True)

    # ---- queues ----------------------------------------------------------------------------------------
    def issue(self, g, kind, vregs, sregs, apply):
        """Put an outstanding memory op of group `g` in its queue (kind 'vm', 'ds' or 'smem')."""
        self.seq += 1
        e = Entry(self.seq, kind, g.waves, vregs, sregs, apply, g.pc - 1)
        (g.vmq if kind == "vm" else g.lgkmq).append(e)
        for r in vregs:
            g.pend_v[r] = g.pend_v.get(r, 0) + 1
        for r in sregs:
            g.pend_s[r] = g.pend_s.get(r, 0) + 1
        return e

    def wait(self, g, vmcnt=None, lgkmcnt=None):
        """s_waitcnt: retire what the counts guarantee, in issue order."""
        todo = []  # (entry, waves or None=all pending)
        if vmcnt is not None and len(g.vmq) > vmcnt:
            todo += self._due_in_order(g, g.vmq, vmcnt, lambda e: True)
        if lgkmcnt is not None and g.lgkmq:
            if lgkmcnt == 0:
                todo += [(e, None) for e in g.lgkmq]
            else:
                # SMEM can return in any order: with one outstanding only lgkmcnt(0) guarantees anything
                # about it; DS ops return in order among themselves.
                todo += self._due_in_order(g, g.lgkmq, lgkmcnt, lambda e: e.kind == "ds")
        if todo:
            todo.sort(key=lambda x: x[0].seq)
            for e, waves in todo:
                self._retire(g, e, waves)

    def _due_in_order(self, g, queue, n, counts):
        """Entries of an in-order queue that must be complete when at most `n` remain, per wave."""
        sel = [e for e in queue if counts(e)]
        if len(sel) <= n:
            return []
        if all(e.waves is None for e in queue):
            return [(e, None) for e in sel[:len(sel) - n]]
        # some entries cover only some waves: count per wave from the youngest
        younger = {w: 0 for w in g.waves}
        due = []
        for e in reversed(sel):
            mine = e.waves if e.waves is not None else frozenset(e.issue_waves) & g.waveset
            retire = frozenset(w for w in mine if younger[w] >= n)
            for w in mine:
                younger[w] += 1
            if retire:
                due.append((e, None if retire == mine else retire))
        due.reverse()
        return due

    def _retire(self, g, e, waves):
        try:
            e.apply(e.positions(waves, self.device))
        except Fault as f:
            if f.pc is None:
                f.pc = e.pc
            raise
        if waves is not None:
            left = (e.waves if e.waves is not None else frozenset(e.issue_waves)) - waves
            if left:
                e.waves = left
                return
        queue = g.vmq if e.kind == "vm" else g.lgkmq
        queue.remove(e)
        for r in e.vregs:
            c = g.pend_v[r] - 1
            if c:
                g.pend_v[r] = c
            else:
                del g.pend_v[r]
        for r in e.sregs:
            c = g.pend_s[r] - 1
            if c:
                g.pend_s[r] = c
            else:
                del g.pend_s[r]

    def end_program(self, g):
        """s_endpgm: the waves end; their outstanding memory operations still complete."""
        for e in sorted(g.vmq + g.lgkmq, key=lambda e: e.seq):
            self._retire(g, e, None)
        g.state = DONE

    # ---- divergence -------------------------------------------------------------------------------------
    def branch(self, g, take, target):
        """Conditional branch with per-wave condition `take` (bool [n])."""
        if take.all():
            g.pc = target
        elif take.any():
            flags = take.tolist()
            taken = [w for w, f in zip(g.waves, flags) if f]
            fall = [w for w, f in zip(g.waves, flags) if not f]
            a = self._subgroup(g, taken, target)
            b = self._subgroup(g, fall, g.pc)
            self.groups = [x for x in self.groups if x is not g] + [a, b]
            g.state = "split"

    def _subgroup(self, g, waves, pc):
        s = Group(self, waves, pc)
        ws = s.waveset
        s.vmq = [x for x in (e.restricted(ws) for e in g.vmq) if x is not None]
        s.lgkmq = [x for x in (e.restricted(ws) for e in g.lgkmq) if x is not None]
        _rebuild_pending(s)
        s.t, s.m0_t = g.t, g.m0_t
        s.mfma_recs = [r[:5] + [w] for r in g.mfma_recs for w in [_narrow(r[5], g.waveset, ws)] if w is not False]
        s.valu_recs = [r[:3] + [w] for r in g.valu_recs for w in [_narrow(r[3], g.waveset, ws)] if w is not False]
        return s

    def _merge(self, groups):
        waves = sorted(w for g in groups for w in g.waves)
        m = Group(self, waves, groups[0].pc)
        m.t = max(g.t for g in groups)
        m.m0_t = max(g.m0_t + m.t - g.t for g in groups)
        for g in groups:
            shift = m.t - g.t
            m.vmq += g.vmq
            m.lgkmq += g.lgkmq
            m.mfma_recs += [[r[0] + shift] + r[1:5] + [r[5] if r[5] is not None else g.waveset] for r in g.mfma_recs]
            m.valu_recs += [[r[0] + shift] + r[1:3] + [r[3] if r[3] is not None else g.waveset] for r in g.valu_recs]
        m.vmq.sort(key=lambda e: e.seq)
        m.lgkmq.sort(key=lambda e: e.seq)
        _rebuild_pending(m)
        self.groups = [x for x in self.groups if all(x is not g for g in groups)] + [m]
        return m

    # ---- helpers used by instruction handlers ----------------------------------------------------------

def _same_state(a, b) -> bool:
    return a[:2] == b[:2] and all(torch.equal(x, y) for x, y in zip(a[2:], b[2:]))


def _max_steps() -> int:
    """$TILEGCN_EMULATOR_MAX_STEPS: the most instruction steps a launch may take (a runaway loop's stop)."""
    return positive_int_env("TILEGCN_EMULATOR_MAX_STEPS", DEFAULT_MAX_STEPS, "instruction steps")


def positive_int_env(name: str, default: int, unit: str) -> int:
    """The positive whole number in $`name`, `default` when unset or empty; any other text is an EmulatorError
    (a typo must not silently fall back to the default)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise EmulatorError(f"tilegcn emulator: ${name} must be a positive whole number of {unit}, got {text!r}; "
                            f"unset it for the default ({default})")
    return value


def _narrow(waves, parent, child):
    """A hazard record's waves (None = all of the group) seen from a child group: None, a set, or False
    when the record concerns none of the child's waves."""
    mine = (parent if waves is None else waves) & child
    if not mine:
        return False
    return None if mine == child else mine


def _rebuild_pending(g):
    g.pend_v, g.pend_s = {}, {}
    for e in g.vmq + g.lgkmq:
        for r in e.vregs:
            g.pend_v[r] = g.pend_v.get(r, 0) + 1
        for r in e.sregs:
            g.pend_s[r] = g.pend_s.get(r, 0) + 1
