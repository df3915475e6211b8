"""The whole launch: occupancy, dispatch rounds, extrapolation, and the `Estimate` it returns.

Occupancy (S7, S13, S8): waves per SIMD = min(8, 512 // roundup(VGPRs + AGPRs, 8)); workgroups per CU are
limited by those wave slots (a workgroup's waves spread over the 4 SIMDs), by the CU's LDS (allocation
rounded up to the arch's granule) and by 32 wave slots. Dispatch: workgroup i to XCD i % 8 (S19v9), then
to the XCD's CUs; with R workgroups resident per CU the busiest CU runs ceil(ceil(n / CUs) / R) rounds of
R workgroups, each round timed by `cu.simulate` on copies of the detailed workgroup's streams; a partly filled
last round is simulated with the workgroups it has (fewer per CU, or fewer CUs busy). The bandwidth each CU gets
is its share of the XCD's L2 and of HBM among the CUs that have work in the round.

Workgroups of unequal work (`sample_workgroups`, `sample_rows`, `_unequal_grid`): five workgroups along x
(first to last) and the first of four rows along y are recorded; if their streams differ (causal attention with
the query tile in x or in y, a persistent kernel's shares), each distinct one is simulated, a workgroup's cycles
and FLOPs are interpolated linearly in x and in y between them (summed), and the grid is dispatched greedily:
each workgroup, in linear order, to the CU slot that frees up first.
"""
from __future__ import annotations

import bisect
import heapq
import json
import math

import torch

from ..amdgcn.arch import DEVICES, TIMING
from ..errors import ArgumentError
from ..runtime.emulator.tracing import dim3
from .band import HOLDOUT, band_text
from .cu import simulate
from .l2 import hit_rate
from .ops import classify
from .trace import record


class Estimate:
    """What the timing model predicts for one launch: `.cycles`, `.seconds` at `.clock_hz`, `.tflops`
    (when the FLOPs are known), `.breakdown` (dict), readable `str()`."""

    def __init__(self, kernel, device, arch, cycles, clock_hz, flops, breakdown):
        self.kernel, self.device, self.arch = kernel, device, arch
        self.cycles = cycles
        self.clock_hz = clock_hz
        self.flops = flops
        self.breakdown = breakdown

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz

    @property
    def error_band(self):
        """The model's measured error on foreign kernels it was not fitted to (perfmodel/band.py), or None."""
        return HOLDOUT.get(self.device)

    @property
    def tflops(self):
        return None if not self.flops else self.flops / self.seconds / 1e12

    def __repr__(self):
        return f"<Estimate {self.kernel} on {self.device}: {self.cycles:.0f} cycles>"

    def __str__(self):
        b = self.breakdown
        lines = [
            f"{self.kernel} on {self.device} ({self.arch}), timing model estimate",
            f"  cycles            {self.cycles:,.0f}  ({_rounds_text(b)})",
            f"  time              {self.seconds * 1e6:,.1f} us at a sustained {self.clock_hz / 1e9:.2f} GHz",
        ]
        if self.tflops is not None:
            lines.append(f"  throughput        {self.tflops:,.1f} TFLOP/s ({self.flops:.3g} FLOP)")
        lines += [
            f"  occupancy         {b['workgroups_per_cu']} workgroup(s)/CU, {b['waves_per_simd']} wave(s)/SIMD "
            f"(limited by {b['occupancy_limit']})",
            f"  MFMA pipe busy    {b['mfma_busy_pct']:.1f} %",
            f"  stalls (per wave) vmcnt {b['stall_vmcnt_pct']:.1f} %, lgkmcnt {b['stall_lgkmcnt_pct']:.1f} %, "
            f"barrier {b['stall_barrier_pct']:.1f} %",
            f"  LDS utilisation   {b['lds_util_pct']:.1f} %    L1 (TCP) utilisation {b['l1_util_pct']:.1f} %",
            f"  L2 hit rate       {b['l2_hit_rate'] * 100:.1f} %    HBM bandwidth use {b['hbm_util_pct']:.1f} %",
            f"  limited by        {b['limiting']}",
            f"  detail            {b['simulated_cycles']:,.0f} cycles simulated, {b['skipped_trips']} loop "
            f"trip(s) extrapolated",
            f"  model error       {band_text(self.device)}",
        ]
        return "\n".join(lines)


def _rounds_text(b):
    if "unequal_workgroups" in b:
        per = ", ".join(f"x={x}: {c:,.0f}" for x, c in b["unequal_workgroups"])
        if len(b.get("unequal_rows", ())) > 1:
            per += "; along y: " + ", ".join(f"y={y}: {c:,.0f}" for y, c in b["unequal_rows"])
        shape = "" if b.get("unequal_linear", True) else "; not a linear function of x (remapped ids?): samples only"
        return (f"workgroups of unequal work, {b['workgroups_per_cu']}/CU, each CU taking the next as one ends "
                f"({per}{shape})")
    text = f"{b['rounds']} round(s) of {b['cycles_per_round']:,.0f}"
    if b.get("last_round_cycles", b["cycles_per_round"]) != b["cycles_per_round"]:
        text += f", the last partly filled: {b['last_round_cycles']:,.0f}"
    return text


def timing_of(device):
    """(device name, Timing) for "MI300X"/"MI355X" or an arch name."""
    arch = DEVICES.get(str(device), str(device))
    if arch not in TIMING:
        raise ArgumentError(f"tilegcn: unknown device {device!r} for estimate(); known: {', '.join(DEVICES)}")
    return TIMING[arch].device, TIMING[arch]


def occupancy(arch, t, kd, waves_per_wg, lds_bytes):
    """(workgroups per CU, waves per SIMD from registers, limiting resource)."""
    wps = arch.waves_per_simd(kd.vgpr_count)
    limits = {"registers": max(1, t.simds_per_cu * wps // waves_per_wg),
              "wave slots": max(1, t.simds_per_cu * t.max_waves_per_simd // waves_per_wg)}
    if lds_bytes:
        alloc = -(-lds_bytes // t.lds_alloc_granule) * t.lds_alloc_granule
        limits["LDS"] = max(1, t.lds_bytes_per_cu // alloc)
    limit = min(limits, key=limits.get)
    return limits[limit], wps, limit


def estimate(module, name, grid=(1, 1, 1), block=(64, 1, 1), args=(), device="MI355X", flops=None,
             shared_mem=0, kernarg=None, buffers=(), clock_hz=None, trace=None, detail_iterations=None) -> Estimate:
    """Estimate one launch of `name` (the same launch parameters as Module.launch). The kernel runs on the
    emulated device for the workgroups of one XCD's first round (its stores land in `args`' tensors, with
    garbage values where loops were fast-forwarded). `flops`: the launch's FLOPs (default: the MFMAs'
    2*M*N*K). `trace`: a path to write the simulated schedule as Chrome/Perfetto trace events.
    `detail_iterations`: loop trips simulated before a loop is fast-forwarded; default 4 per workgroup
    resident on a CU (co-resident workgroups take a few trips each to settle into their steady stagger)."""
    dev_name, t = timing_of(device)
    arch = module.arch
    if TIMING[arch.name] is not t:
        other = next(d for d, a in DEVICES.items() if a == arch.name)
        raise ArgumentError(f"tilegcn: the code object is for {arch.name} ({other}); {dev_name} runs "
                            f"{DEVICES[dev_name]} code objects: compile for that arch to estimate it there")
    grid, block = dim3(grid, "grid"), dim3(block, "block")
    clock = float(clock_hz or t.clock_hz)  # the bandwidth shares per clk: at the full-load clock
    info = module.kernels.get(name)
    if info is None:
        module.program(name, torch.device("cpu"))  # raises the emulator's "no kernel" error
    kd = info.descriptor
    threads = block[0] * block[1] * block[2]
    wpw = -(-threads // 64)
    n_wg = grid[0] * grid[1] * grid[2]
    wgs_cu, wps, limit = occupancy(arch, t, kd, wpw, kd.group_segment_fixed_size + shared_mem)
    cus_per_xcd = t.cus // arch.num_xcds
    per_cu = -(-n_wg // t.cus)
    resident = min(wgs_cu, per_cu)
    rounds = -(-per_cu // resident)
    xcd_wgs = list(range(0, n_wg, arch.num_xcds)[:cus_per_xcd * resident])  # (a lazy slice: any grid size)
    launch_args = dict(grid=grid, block=block, args=args, shared_mem=shared_mem, kernarg=kernarg, buffers=buffers)
    detail = detail_iterations or 4 * resident
    samples = sample_workgroups(grid)
    rows = sample_rows(grid)
    # a workgroup at the last x of the next row (y = 1, or z = 1 in a one-row grid): work that depends on x alone
    # gives it the same path as the last x sample; a grid that remaps its ids (T.use_swizzle) or whose work varies
    # along y does not. (Not the grid's last workgroup: a caller may map only the first batch's memory, as
    # bench/attention.py does at 1 GiB tensors, and the model runs nothing past the first rows.)
    step = grid[0] if grid[1] > 1 else grid[0] * grid[1]
    probe = [grid[0] - 1 + step] if n_wg > grid[0] else []
    row_ids = [y * grid[0] for y in rows]
    tr = record(module, name, launch_args, xcd_wgs, detail, t.l2_line_bytes, detailed=samples + row_ids + probe)
    x_streams = tr.samples[:len(samples)]
    y_streams = [x_streams[0]] + tr.samples[len(samples):len(samples) + len(rows)]
    vary_y = any(streams != x_streams[0] for streams in y_streams[1:])
    # with work along y the probe's path differs from the last x sample's anyway: the row samples say how
    along_x = not probe or vary_y or tr.samples[-1] == x_streams[-1]
    tr.samples = x_streams
    hit, requests, misses = hit_rate(tr.footprints, t.l2_bytes_per_xcd, t.l2_line_bytes, t.l2_refetch_base,
                                     t.l2_refetch_per_gap, t.l1_bytes_per_cu)
    ops = [classify(ins, h, arch) for ins, h in zip(module.instrs, tr.program.handlers)]
    active_cus = min(n_wg, t.cus)
    events = [] if trace else None
    l2_bw, hbm_bw = _bandwidth_shares(t, arch, clock, active_cus)
    cu = simulate(tr.streams, ops, t, arch.lds_banks, resident, (hit, l2_bw, hbm_bw), events)
    last = _last_round(n_wg, t.cus, resident, rounds)
    if rounds > 1 and last != (resident, active_cus):
        # a partly filled last round: its busiest CU runs fewer workgroups, and the CUs with work share L2
        # and HBM among fewer (the L2 hit rate is the first round's)
        tail = simulate(tr.streams, ops, t, arch.lds_banks, last[0],
                        (hit, *_bandwidth_shares(t, arch, clock, last[1])))
        last_cycles = tail.cycles
    else:
        last_cycles = cu.cycles
    cycles = t.launch_overhead_clk + (rounds - 1) * cu.cycles + last_cycles
    mfma_flops = _wg_flops(cu, wpw) * n_wg
    usage, simulated, skipped = _usage(cu, t, hit, hbm_bw), cu.simulated_cycles, cu.skipped_trips
    unequal = None
    if any(streams != tr.streams for streams in x_streams[1:]) or vary_y or not along_x:
        # workgroups of unequal work (a causal grid, a persistent kernel's share): time each distinct sampled one
        sim_of = _distinct_simulations(lambda streams: simulate(
            streams, ops, t, arch.lds_banks, resident, (hit, l2_bw, hbm_bw)), first=(tr.streams, cu))
        sims_x = [sim_of(streams) for streams in x_streams]
        sims_y = [sims_x[0]] + [sim_of(streams) for streams in y_streams[1:]]
        unequal = _unequal_grid(grid, samples, sims_x, [0, *rows], sims_y, wpw, t.cus * resident)
        unequal["linear"] = unequal["linear"] and along_x
        cycles = t.launch_overhead_clk + unequal["makespan"]
        mfma_flops = unequal["flops"]
        sims = sims_x + sims_y[1:]
        usage = {k: sum(w * _usage(sim, t, hit, hbm_bw)[k] for w, sim in zip(unequal["weights"], sims))
                 for k in usage}
        distinct = {id(sim): sim for sim in sims}.values()
        simulated = sum(sim.simulated_cycles for sim in distinct)
        skipped = sum(sim.skipped_trips for sim in distinct)
        cu = max(sims, key=lambda sim: sim.cycles)  # the busiest sampled workgroup's schedule for `trace`
    if trace:
        _write_trace(trace, cu.events, name, dev_name)
    breakdown = {
        "cycles_per_round": cu.cycles, "rounds": rounds, "last_round_cycles": last_cycles, "workgroups": n_wg,
        "workgroups_per_cu": resident,
        "waves_per_simd": resident * wpw / t.simds_per_cu, "occupancy_limit": limit,
        **usage, "l2_hit_rate": hit, "l2_requests": requests, "l2_misses": misses,
        "simulated_cycles": simulated, "skipped_trips": skipped,
    }
    if unequal is not None:
        breakdown["unequal_workgroups"] = unequal["samples"]
        breakdown["unequal_rows"] = unequal["rows"]
        breakdown["unequal_linear"] = unequal["linear"]
    breakdown["limiting"] = _limiting(breakdown)
    # seconds at the clock this load sustains (Timing.clock_at), unless the caller gave one: the SIMDs' MFMA and VALU
    # busy share together (both draw on the SIMD's power; S19's GEMMs, the clock law's data, issue little VALU work)
    clock = float(clock_hz or t.clock_at(min(1.0, (usage["mfma_busy_pct"] + usage["valu_busy_pct"]) / 100)))
    return Estimate(name, dev_name, arch.name, cycles, clock, flops if flops is not None else mfma_flops, breakdown)


def sample_workgroups(grid):
    """The workgroups whose streams the model records: five along x (y = z = 0), the first, the last and three
    near the quarter points, where the work of a causal attention grid (query tile x sees x + 1 key tiles) or of a
    persistent kernel's workgroups varies. The k-th is moved k past its quarter point so that no two go to one XCD
    (workgroup i runs on XCD i % 8): a grid that remaps its ids per XCD (T.use_swizzle) then samples tiles from
    different parts of its order, not five from XCD 0's first share. Workgroups that take the same path cost one
    recorded workgroup (they share the emulator's work)."""
    gx = grid[0]
    return sorted({0, *(min(gx - 1, k * gx // 4 + k) for k in (1, 2, 3)), gx - 1})


def sample_rows(grid):
    """The rows (y > 0, at x = z = 0) whose first workgroup the model records besides `sample_workgroups`: near the
    quarter points and the last, for a grid whose work varies along y (HipKittens' causal attention puts the query
    block in y). Not along z: a caller may map only the first batches' memory (bench/model_accuracy.py), and the
    probe past the first row (grid.estimate) still flags a grid whose work varies there."""
    gy = grid[1]
    return sorted({*(min(gy - 1, k * gy // 4 + k) for k in (1, 2, 3)), gy - 1} - {0})


def _wg_flops(cu, wpw):
    """The MFMA FLOPs of one workgroup (the first `wpw` waves of the simulated CU), fast-forwarded trips included."""
    return sum(acc["flops"] for acc in cu.per_wave[:wpw])


def _usage(cu, t, hit, hbm_bw):
    """The busy and stall shares (%) of one simulated CU."""
    c = cu.cycles
    waves = cu.per_wave
    stall = {k: 100.0 * sum(a[k] for a in waves) / len(waves) / c for k in ("vmcnt", "lgkmcnt", "barrier")}
    return {"mfma_busy_pct": 100.0 * sum(cu.mfma_busy) / (len(cu.mfma_busy) * c),
            "valu_busy_pct": 100.0 * cu.valu_busy / (len(cu.mfma_busy) * c),
            "stall_vmcnt_pct": stall["vmcnt"], "stall_lgkmcnt_pct": stall["lgkmcnt"],
            "stall_barrier_pct": stall["barrier"],
            "lds_util_pct": 100.0 * cu.lds_busy / (c * max(1, t.simds_per_cu // 2)),
            "l1_util_pct": 100.0 * cu.tcp_busy / c,
            "hbm_util_pct": 100.0 * cu.vmem_bytes * (1 - hit) / c / hbm_bw}


def _unequal_grid(grid, samples, sims_x, ys, sims_y, wpw, slots):
    """Time a grid whose workgroups do unequal work from its sampled workgroups: linear ids `samples` at y = z = 0
    with their simulated CUs `sims_x`, and rows `ys` (at x = z = 0, the first being y = 0) with `sims_y`. A
    workgroup at (x, y) costs the cycles interpolated linearly in x plus those interpolated in y, less the shared
    (0, 0) workgroup's: work that varies along x (TileLang's causal ports: query tile x) or along y (HipKittens'
    causal attention: grid (heads, query blocks, batch)) is followed either way. Workgroups take the first of the
    `slots` (CUs x resident) to free up, in linear-id order, as the dispatcher hands a freed CU the next one.
    Returns the makespan, the launch's MFMA FLOPs, each sample's weight (its share of the interpolated cycles,
    x samples then the rows past y = 0), (x, cycles) per x sample and (y, cycles) per row."""
    gx, gy, gz = grid
    xs = [s % gx for s in samples]
    cx, fx, wx = _along(xs, [sim.cycles for sim in sims_x], [_wg_flops(sim, wpw) for sim in sims_x], gx)
    cy, fy, wy = _along(ys, [sim.cycles for sim in sims_y], [_wg_flops(sim, wpw) for sim in sims_y], gy)
    c0, f0 = sims_x[0].cycles, _wg_flops(sims_x[0], wpw)
    weights = [w * gy for w in wx] + [w * gx for w in wy[1:]]
    weights[0] = max(0.0, weights[0] + wy[0] * gx - c0 * gx * gy)
    free = [0.0] * min(slots, gx * gy * gz)
    for _ in range(gz):
        for y in range(gy):
            row = cy[y] - c0
            for c in cx:
                heapq.heapreplace(free, free[0] + max(0.0, c + row))
    flops = gz * (gy * sum(fx) + gx * sum(fy) - gx * gy * f0)
    total = sum(weights) or 1.0
    linear = _linear(xs, [sim.cycles for sim in sims_x]) and _linear(ys, [sim.cycles for sim in sims_y])
    return {"makespan": max(free), "flops": flops, "weights": [w / total for w in weights],
            "samples": [(x, sim.cycles) for x, sim in zip(xs, sims_x)],
            "rows": [(y, sim.cycles) for y, sim in zip(ys, sims_y)], "linear": linear}


def _along(points, cycles, flops, n):
    """Interpolate the samples at coordinates `points` (sorted, the first 0) linearly over 0..n-1 (constant past
    the last): (cycles per coordinate, FLOPs per coordinate, each sample's share of the summed cycles)."""
    if len(points) == 1:
        return [cycles[0]] * n, [flops[0]] * n, [cycles[0] * n]
    per_c, per_f, weights = [], [], [0.0] * len(points)
    for x in range(n):
        k = max(0, min(len(points) - 2, bisect.bisect_right(points, x) - 1))
        f = min(1.0, (x - points[k]) / (points[k + 1] - points[k]))
        per_c.append((1 - f) * cycles[k] + f * cycles[k + 1])
        per_f.append((1 - f) * flops[k] + f * flops[k + 1])
        weights[k] += (1 - f) * cycles[k]
        weights[k + 1] += f * cycles[k + 1]
    return per_c, per_f, weights


def _distinct_simulations(run, first):
    """A function from a sampled workgroup's streams to its simulated CU that runs `run` once per distinct path
    (`first`: the (streams, simulated CU) already at hand)."""
    done = [first]

    def sim_of(streams):
        for seen, sim in done:
            if seen == streams:
                return sim
        done.append((streams, run(streams)))
        return done[-1][1]
    return sim_of


def _linear(xs, cycles, tolerance=0.25):
    """Do the inner samples lie near the line through the first and last (within `tolerance` of their spread)? Not
    when the grid remaps workgroup ids (T.use_swizzle: the sampled x are other tiles) or the work varies otherwise:
    the estimate then averages the sampled workgroups rather than following x."""
    spread = max(cycles) - min(cycles)
    line = [cycles[0] + (cycles[-1] - cycles[0]) * (x - xs[0]) / max(1, xs[-1] - xs[0]) for x in xs]
    return all(abs(c - l) <= tolerance * spread for c, l in zip(cycles, line))


def _bandwidth_shares(t, arch, clock, active_cus):
    """(L2 bytes/clk, HBM bytes/clk) one CU gets when `active_cus` CUs have work: its XCD's L2 split among the
    XCD's busy CUs, HBM among all busy CUs."""
    cus_per_xcd = t.cus // arch.num_xcds
    l2_bw = t.l2_bytes_per_clk_per_xcd / max(1, min(cus_per_xcd, math.ceil(active_cus / arch.num_xcds)))
    return l2_bw, t.hbm_bytes_per_s / clock / active_cus


def _last_round(n_wg, cus, resident, rounds):
    """(workgroups on the busiest CU, CUs with work) in the last dispatch round: the workgroups left after the
    full rounds, spread over the CUs."""
    left = n_wg - (rounds - 1) * resident * cus
    return -(-left // cus), min(left, cus)


def _limiting(b):
    """The resource a person should look at first."""
    used = {"MFMA pipe (compute bound)": b["mfma_busy_pct"], "L1/TCP (vector memory issue)": b["l1_util_pct"],
            "LDS bandwidth": b["lds_util_pct"], "HBM bandwidth": b["hbm_util_pct"]}
    top = max(used, key=used.get)
    if used[top] >= 80:
        return top
    stalls = {"memory latency (vmcnt waits)": b["stall_vmcnt_pct"], "LDS latency (lgkmcnt waits)":
              b["stall_lgkmcnt_pct"], "barriers": b["stall_barrier_pct"]}
    worst = max(stalls, key=stalls.get)
    return worst if stalls[worst] >= 10 else top


def _write_trace(path, events, name, device):
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"{device} CU: MFMA pipe per SIMD"}}]
    meta += [{"name": "process_name", "ph": "M", "pid": 1 + s, "args": {"name": f"SIMD {s} waves"}}
             for s in range(4)]
    with open(path, "w") as f:
        json.dump({"traceEvents": meta + events, "displayTimeUnit": "ns",
                   "otherData": {"kernel": name, "time unit": "1 us in the viewer = 1 clk"}}, f)
