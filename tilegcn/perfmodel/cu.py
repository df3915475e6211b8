"""One CU, clock by clock: the waves of the resident workgroups replaying their traced streams.

Issue rules (S11, docs/timing-sources.md §2): SIMD s gets an issue slot at every clk t with t % 4 == s. In its slot it
issues at most one instruction per wave and one per category (VALU+MFMA, VMEM, SALU/SMEM, LDS, branch)
across its waves; waves are tried in s_setprio order (higher first), then oldest first. s_waitcnt,
s_nop, s_barrier and s_setprio take the wave's slot but no category. After issuing, a wave's next
instruction can issue in its SIMD's next slot (4 clk later), except:
- MFMA holds the SIMD's matrix pipe for passes x 4 clk; the next MFMA waits for it (LLVM HWXDL, S6); other
  VALU ops co-issue while it runs (S9), from `valu_hold` clk after its issue (8 clk behind a gfx950 MFMA with
  16-byte sources), packed-f32 ops from `pk_hold` (past its end), and under an f32/f64-input MFMA none until
  2 slots past its end (ops.py, S33). The hardware does not interlock
  on MFMA results: wait states are the code's s_nops, which the model executes (s_nop N holds the wave
  for N + 1 slots) - so a dependent chain costs what the hazard table makes the compiler insert.
- a transcendental VALU op takes one issue slot like any VALU op, and its result is ready `trans_clk` after
  issue (LLVM's gfx942/gfx950 model, S6: WriteTrans32 holds HWVALU 1 quad-cycle, latency 4 quad-cycles; checked
  with llvm-mca, tests/test_perfmodel_issue.py): a later vector instruction of the wave that reads it waits
  (the hardware interlocks: S7's TransForwardingHazard asks only 1 wait state of the code). Independent
  instructions issue meanwhile (aiter's FAv3 issues 3 v_exp_f32 between its MFMAs).
- a taken branch adds `branch_taken_clk`.
- VMEM and DS go through `memory.py`; their completion times feed vmcnt (in order) and lgkmcnt (DS in
  order; SMEM returns after `smem_latency_clk`, and only lgkmcnt(0) waits for it, as in the emulator).
  A load no lane of which was in range (trace.SKIPPED_LOAD: a masked tail's copy past the end) reads no memory:
  it takes its issue slot and no TCP cycles, bytes or round trip (chosen: no published timing of one).
- s_waitcnt holds the wave until the counted operations have completed.
- s_barrier holds every wave of the workgroup until the last live one arrives, plus `barrier_release_clk`.
- s_endpgm: the wave ends when its last MFMA and memory operations have completed.
Nothing else stalls a wave (no register scoreboard beyond transcendental results: the ISA leaves the other
hazards to software).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .memory import LdsPort, VmemPath
from .trace import SKIPPED_LOAD, Skip

INF = float("inf")
STALLS = ("vmcnt", "lgkmcnt", "barrier", "nop", "vmem_issue", "lds_issue", "mfma_pipe", "trans_result")
# what each wave keeps busy (clk; bytes for vmem_bytes), counted per wave so that fast-forwarded trips
# extrapolate them at the steady loop's rate, like the stalls
BUSY = ("mfma_busy", "valu_busy", "tcp_busy", "lds_busy", "vmem_bytes")


class Wave:
    __slots__ = ("id", "wg", "simd", "stream", "i", "ready", "prio", "vm", "ds", "smem", "done", "acc",
                 "backedges", "skipped", "name", "trans")

    def __init__(self, wid, wg, simd, stream):
        self.id, self.wg, self.simd, self.stream = wid, wg, simd, stream
        self.i = 0
        self.ready = 0.0
        self.prio = 0
        self.vm, self.ds, self.smem = [], [], []
        self.done = None
        self.acc = dict.fromkeys(STALLS + BUSY + ("issued", "flops"), 0.0)
        self.backedges = {}  # loop pc -> [(time, acc copy)]
        self.skipped = []  # (trips, clk per trip, acc per trip)
        self.trans = {}  # VGPR -> when the transcendental op writing it has its result
        self.name = f"wg{wg} wave{wid}"


@dataclass
class CuResult:
    cycles: float  # simulated cycles plus fast-forwarded trips
    simulated_cycles: float
    per_wave: list  # acc dicts extrapolated over the skipped trips
    mfma_busy: list  # per SIMD, clk (extrapolated)
    lds_busy: float  # clk, summed over the LDS ports (extrapolated)
    tcp_busy: float  # clk (extrapolated)
    vmem_bytes: float  # (extrapolated)
    skipped_trips: int
    events: list = field(default_factory=list)
    valu_busy: float = 0.0  # clk of VALU issue, summed over the SIMDs (extrapolated)


def simulate(streams, ops, t, banks, n_wgs, vmem_args, events=None) -> CuResult:
    """Replay `streams` (one per wave of a workgroup; list of (pc, extra LDS cycles) or Skip) for `n_wgs`
    copies of the workgroup on one CU. `ops[pc]` is the Op of each pc."""
    wpw = len(streams)
    prepared = [_prepare(s, ops) for s in streams]
    waves = [Wave(k * wpw + w, k, (k * wpw + w) % t.simds_per_cu, prepared[w])
             for k in range(n_wgs) for w in range(wpw)]
    by_simd = [[w for w in waves if w.simd == s] for s in range(t.simds_per_cu)]
    xdl_until = [0.0] * t.simds_per_cu
    valu_from = [0.0] * t.simds_per_cu  # no VALU op of the SIMD issues before (an MFMA's hold, S9, S33)
    pk_from = [0.0] * t.simds_per_cu  # nor a packed-f32 one before
    ports = [LdsPort(t, banks) for _ in range(max(1, t.simds_per_cu // 2))]
    vmem = VmemPath(t, *vmem_args)
    barrier = {k: [] for k in range(n_wgs)}
    live = {k: wpw for k in range(n_wgs)}
    slot = t.issue_slot_clk
    alive = list(waves)
    now = 0.0
    ev = events

    def release_barrier(k, when):
        arrived = barrier[k]
        if len(arrived) >= live[k] and arrived:
            release = max(when, max(a for _, a in arrived)) + t.barrier_release_clk
            for w, a in arrived:
                w.acc["barrier"] += release - a
                w.ready = release
                if ev is not None:
                    ev.append(_ev(w, "barrier", a, release - a))
            barrier[k] = []

    while alive:
        s = int(now) % t.simds_per_cu
        used = set()
        cands = [w for w in by_simd[s] if w.done is None and w.ready <= now]
        if len(cands) > 1:
            cands.sort(key=lambda w: (-w.prio, w.id))
        for w in cands:
            while isinstance(w.stream[w.i][0], Skip):
                _skip(w, w.stream[w.i][0])
                w.i += 1
            op, extra, taken, back, pc = w.stream[w.i]
            cat = op.category
            if cat is not None and cat in used:
                continue
            kind = op.kind
            if w.trans and op.vreads:
                due = max(w.trans.get(r, 0.0) for r in op.vreads)
                if due > now:
                    w.ready = due
                    w.acc["trans_result"] += due - now
                    continue
            nxt = now + slot
            if kind == "mfma":
                if xdl_until[s] > now:
                    w.ready = xdl_until[s]
                    w.acc["mfma_pipe"] += xdl_until[s] - now
                    continue
                busy = op.passes * 4
                xdl_until[s] = now + busy
                valu_from[s] = now + op.valu_hold
                pk_from[s] = now + op.pk_hold
                w.acc["mfma_busy"] += busy
                w.acc["flops"] += op.flops
                if ev is not None:
                    ev.append({"name": pc_name(op, pc), "ph": "X", "ts": now, "dur": busy, "pid": 0, "tid": s})
            elif kind in ("valu", "trans"):
                held = pk_from[s] if op.packed_f32 else valu_from[s]
                if held > now:
                    w.ready = held
                    continue
                if kind == "trans":
                    _write_trans(w, op, now + t.trans_clk, now)
                w.acc["valu_busy"] += slot
            elif kind == "vmem" and extra == SKIPPED_LOAD:
                w.vm.append(max(nxt, w.vm[-1]) if w.vm else nxt)
            elif kind == "vmem":
                blocked = vmem.blocked_until(now)
                if blocked is not None:
                    w.acc["vmem_issue"] += blocked - now
                    w.ready = blocked
                    continue
                done, clk = vmem.issue(now, op)
                w.acc["tcp_busy"] += clk
                w.acc["vmem_bytes"] += op.bytes_per_lane * 64
                w.vm.append(max(done, w.vm[-1]) if w.vm else done)
            elif kind == "ds":
                port = ports[s // 2 % len(ports)]
                blocked = port.blocked_until(now, w.id)
                if blocked is not None:
                    w.acc["lds_issue"] += blocked - now
                    w.ready = blocked
                    continue
                done, clk = port.issue(now, op, extra)
                w.acc["lds_busy"] += clk
                w.ds.append(max(done, w.ds[-1]) if w.ds else done)
            elif kind == "smem":
                w.smem.append(now + t.smem_latency_clk)
            elif kind == "branch":
                if taken:
                    nxt += t.branch_taken_clk
                if back is not None:
                    w.backedges.setdefault(back, []).append((now, dict(w.acc)))
            elif kind == "waitcnt":
                need, why = _wait(w, op, now)
                if need > nxt:
                    w.acc[why] += need - nxt
                    if ev is not None:
                        ev.append(_ev(w, f"wait {why}", nxt, need - nxt))
                    nxt = need
            elif kind == "nop":
                nxt = now + slot * op.nops
                w.acc["nop"] += slot * (op.nops - 1)
            elif kind == "setprio":
                w.prio = op.prio
            elif kind == "barrier":
                barrier[w.wg].append((w, now + slot))
                w.ready = INF
                w.i += 1
                w.acc["issued"] += 1
                release_barrier(w.wg, now + slot)
                continue
            elif kind == "end":
                # the wave's slot frees once its MFMA and memory operations have completed
                w.done = max([now + slot, xdl_until[s]] + w.vm[-1:] + w.ds[-1:])
                alive.remove(w)
                live[w.wg] -= 1
                w.acc["issued"] += 1
                release_barrier(w.wg, now + slot)
                continue
            if cat is not None:
                used.add(cat)
            w.acc["issued"] += 1
            w.ready = nxt
            w.i += 1
            if ev is not None and kind not in ("mfma", "waitcnt"):
                ev.append(_ev(w, pc_name(op, pc), now, slot))
        if not alive:
            break
        now = _next_turn(alive, now, t.simds_per_cu)

    end = max(w.done for w in waves)
    # the CU is done when its slowest wave is: with oldest-first arbitration the younger workgroups stay
    # behind for the whole loop (an 8192^3 GEMM of 128x128 tiles, 3 workgroups/CU, simulated without
    # fast-forward: 2.63 M cycles; this: 2.57 M; the waves' mean rate instead of the slowest: 2.32 M)
    extra = max((sum(n * clk for n, clk, _ in w.skipped) for w in waves), default=0.0)
    per_wave = []
    for w in waves:
        acc = dict(w.acc)
        for n, _, per in w.skipped:
            for k, v in per.items():
                acc[k] += n * v
        per_wave.append(acc)
    busy = [0.0] * t.simds_per_cu
    for w, acc in zip(waves, per_wave):
        busy[w.simd] += acc["mfma_busy"]
    total = {k: sum(acc[k] for acc in per_wave) for k in BUSY}
    # Each wave's skipped trips run at its own measured trip time. Waves sharing a SIMD can measure theirs while
    # the other is not yet (or no longer) in its loop and so each get more of the matrix pipe than two can share
    # (flash attention at 128x64 over 256 threads on gfx950, 2 workgroups a CU: two waves a SIMD, 2,048 MFMA
    # clk a trip each, each timed at ~3,300 clk a trip: 110 % busy). No CU takes less time than its busiest
    # SIMD's matrix pipe or its LDS ports need.
    floor = max(max(busy), total["lds_busy"] / len(ports))
    return CuResult(cycles=max(end + extra, floor), simulated_cycles=end, per_wave=per_wave, mfma_busy=busy,
                    valu_busy=total["valu_busy"],
                    lds_busy=total["lds_busy"], tcp_busy=total["tcp_busy"], vmem_bytes=total["vmem_bytes"],
                    skipped_trips=max((sum(n for n, _, _ in w.skipped) for w in waves), default=0),
                    events=events if events is not None else [])


def pc_name(op, pc):
    return f"{op.kind}@{pc}"


def _ev(w, name, ts, dur):
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": 1 + w.simd, "tid": w.id}


def _next_turn(alive, now, n):
    """The first clk after `now` at which some live wave is ready and its SIMD has the issue slot (SIMD s
    issues at the clks x with x % n == s). A plain loop: this runs once per simulated turn."""
    best = INF
    for w in alive:
        ready = w.ready
        if ready < INF:
            x = int(-(-max(ready, now + 1) // 1))
            x += (w.simd - x) % n
            if x < best:
                best = x
    if best == INF:
        raise RuntimeError("tilegcn timing: every live wave waits at a barrier that cannot release")
    return best


def _write_trans(w, op, due, now):
    """Note when the registers of transcendental op `op` are written; forget results already in."""
    if len(w.trans) > 64:
        w.trans = {r: d for r, d in w.trans.items() if d > now}
    for r in op.vwrites:
        w.trans[r] = due


def _wait(w, op, now):
    """Completion time that s_waitcnt `op` waits for, and the counter that decided it."""
    need, why = now, "vmcnt"
    if op.vmcnt is not None:
        w.vm = [x for x in w.vm if x > now]
        if len(w.vm) > op.vmcnt:
            k = len(w.vm) - op.vmcnt
            need = w.vm[k - 1]
            w.vm = w.vm[k:]
    if op.lgkmcnt is not None:
        w.ds = [x for x in w.ds if x > now]
        lg = now
        if len(w.ds) > op.lgkmcnt:
            k = len(w.ds) - op.lgkmcnt
            lg = w.ds[k - 1]
            w.ds = w.ds[k:]
        if op.lgkmcnt == 0 and w.smem:
            lg = max(lg, max(w.smem))
            w.smem = []
        if lg > need:
            need, why = lg, "lgkmcnt"
    return need, why


def _skip(w, marker):
    """Fast-forwarded trips: the steady trip time and stall mix are the mean over the second half of the
    simulated trips (at least the last two), past the start-up of the loop and of the co-resident waves."""
    marks = w.backedges.get(marker.loop, [])
    if len(marks) < 2:
        return
    first = max(0, min(len(marks) - 3, len(marks) // 2))
    (t0, a), (t1, b) = marks[first], marks[-1]
    trips = len(marks) - 1 - first
    per = {k: (b[k] - a[k]) / trips for k in a}
    w.skipped.append((marker.trips, (t1 - t0) / trips, per))


def _prepare(stream, ops):
    """(Op, extra LDS cycles, taken?, back-edge target or None, pc) per entry; Skip markers kept as (Skip,)."""
    out = []
    n = len(stream)
    for k, e in enumerate(stream):
        if isinstance(e, Skip):
            out.append((e,))
            continue
        pc, extra = e
        nxt = pc + 1  # the next pc: that of the next entry or the one after it (past a Skip marker)
        for x in (stream[k + 1] if k + 1 < n else None, stream[k + 2] if k + 2 < n else None):
            if x is not None and not isinstance(x, Skip):
                nxt = x[0]
                break
        taken = nxt != pc + 1
        back = nxt if taken and nxt <= pc else None
        out.append((ops[pc], extra, taken, back, pc))
    return out
