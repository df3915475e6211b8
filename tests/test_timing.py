"""The timing model's cycle accounting on hand-written kernels, and its API (estimate, str, trace, CLI).

Every figure here is relative: differences between two kernels that differ in one thing, against the
rule the model states (tilegcn/perfmodel) and the arch table's parameters."""
import json
import os
import sys

import numpy as np
import pytest
import torch

from tilegcn import ArgumentError
from tilegcn.amdgcn.arch import TIMING, get_arch
from tilegcn.perfmodel import estimate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "asm"))
from emukit import module, srd  # noqa: E402

DEVICE = {"gfx942": "MI300X", "gfx950": "MI355X"}
MFMA = "v_mfma_f32_32x32x8_bf16"  # 8 passes on both arches (docs/timing-sources.md §2)
PASSES = 8


def _estimate(body, arch, **kw):
    mod = module(body, arch=arch, **kw)
    return mod, estimate(mod, "k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32)], device=DEVICE[arch])


def _independent(n):
    # four accumulators in rotation: each MFMA accumulates into its own vdst (srcC == vdst needs no wait)
    return "\n".join(f"{MFMA} v[{16 * (i % 4)}:{16 * (i % 4) + 15}], v[64:65], v[66:67], "
                     f"v[{16 * (i % 4)}:{16 * (i % 4) + 15}]" for i in range(n)) + "\ns_endpgm"


def _nops(states, arch):
    """s_nop instructions that give `states` wait states."""
    top = get_arch(arch).max_nop + 1
    out = []
    while states > 0:
        out.append(f"s_nop {min(states, top) - 1}")
        states -= min(states, top)
    return out


def _dependent(n, arch):
    # each MFMA reads the previous result as srcA: the hazard table's wait states separate them
    nops = _nops(get_arch(arch).mfma_hazards.vdst_to_read[PASSES], arch)
    lines = []
    for _ in range(n):
        lines.append(f"{MFMA} v[0:15], v[0:1], v[2:3], v[0:15]")
        lines += nops
    return "\n".join(lines) + "\ns_endpgm"


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_independent_mfmas_take_passes_times_four_each(arch):
    t = TIMING[arch]
    cycles = {}
    for n in (4, 12):
        mod, est = _estimate(_independent(n), arch, vgprs=72)
        mod.launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32)])  # the emulator accepts it
        cycles[n] = est.cycles
        # start-up: the launch overhead; the wave ends when its last MFMA leaves the pipe
        assert est.cycles == t.launch_overhead_clk + n * PASSES * 4
    assert cycles[12] - cycles[4] == 8 * PASSES * 4


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_dependent_mfma_chain_takes_the_hazard_wait_states(arch):
    states = get_arch(arch).mfma_hazards.vdst_to_read[PASSES]
    slot = TIMING[arch].issue_slot_clk
    cycles = {}
    for n in (3, 7):
        mod, est = _estimate(_dependent(n, arch), arch, vgprs=24)
        mod.launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32)])  # hazard-free: emulator agrees
        cycles[n] = est.cycles
    # one link = the MFMA's own issue slot + its wait states (longer than the 8-pass pipe occupancy)
    assert states + 1 > PASSES
    assert cycles[7] - cycles[3] == 4 * (states + 1) * slot


def _load_kernel(load):
    return "\n".join([
        "s_load_dwordx2 s[4:5], s[0:1], 0",
        "v_lshlrev_b32 v1, 2, v0",
        "s_waitcnt lgkmcnt(0)",
        srd(8, 4, 256),
        "buffer_load_dword v2, v1, s[8:11], 0 offen" if load else "v_mov_b32 v2, 0",
        "s_waitcnt vmcnt(0)",
        "s_endpgm",
    ])


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_one_global_load_takes_the_configured_latency(arch):
    t = TIMING[arch]
    _, with_load = _estimate(_load_kernel(True), arch, vgprs=8, sgprs=16)
    _, without = _estimate(_load_kernel(False), arch, vgprs=8, sgprs=16)
    # the only touch of a line is an L2 miss: the wait ends TCP time + HBM latency after the load issues,
    # then s_endpgm takes a slot; without the load, v_mov, s_waitcnt and s_endpgm take one slot each
    assert with_load.breakdown["l2_hit_rate"] == 0.0
    slot = t.issue_slot_clk
    expected = (t.tcp_clk_per_dword[1] + t.hbm_latency_clk + slot) - 3 * slot
    assert with_load.cycles - without.cycles == expected


def test_estimate_reports_and_traces(tmp_path):
    path = tmp_path / "trace.json"
    mod = module(_independent(4), arch="gfx950", vgprs=72)
    est = estimate(mod, "k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32)], device="MI355X",
                       trace=str(path))
    assert est.seconds == pytest.approx(est.cycles / est.clock_hz)
    assert est.flops == 4 * 2 * 32 * 32 * 8 and est.tflops > 0
    assert est.breakdown["mfma_busy_pct"] > 0 and est.breakdown["limiting"]
    text = str(est)
    assert "MFMA pipe busy" in text and "L2 hit rate" in text and "MI355X" in text
    # next to the figure, the model's measured error on foreign kernels it was not fitted to
    band = est.error_band
    assert band is not None and 0 < band.median <= band.worst and band.within_20 <= band.launches
    assert f"model error       hold-out median |error| {band.median:.1%}" in text
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("ph") == "X" and e["pid"] == 0) == 4  # 4 MFMA-busy spans
    assert all(e["dur"] == PASSES * 4 for e in events if e.get("ph") == "X" and e["pid"] == 0)


def test_estimate_rejects_a_device_of_another_arch():
    mod = module(_independent(1), arch="gfx942", vgprs=72)
    with pytest.raises(ArgumentError, match="gfx942"):
        estimate(mod, "k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32)], device="MI355X")
    with pytest.raises(ArgumentError, match="unknown device"):
        estimate(mod, "k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32)], device="H100")


def test_cli_estimate_prints_a_cache_entry(capsys):
    from tilegcn.__main__ import main

    sys.path.insert(0, os.path.dirname(__file__))
    from kernels import copy2d

    x = torch.zeros(128, 256, dtype=torch.float32)
    k = copy2d.compile(x, x.clone(), arch="gfx942")
    assert main(["estimate", k.key[:12]]) == 0
    out = capsys.readouterr().out
    assert f"{k.name} on MI300X (gfx942)" in out and "L2 hit rate" in out
    # the hold-out band of MI300X's own foreign kernels (aiter's gfx942 int8 GEMMs), not MI355X's
    from tilegcn.perfmodel.band import HOLDOUT
    assert f"model error       {HOLDOUT['MI300X']}" in out and str(HOLDOUT["MI300X"]) != str(HOLDOUT["MI355X"])
    assert main(["estimate", k.key[:12], "--device", "MI355X"]) == 1  # a gfx942 code object on MI355X
    assert "gfx942" in capsys.readouterr().err


def _loop_kernel(trips):
    mfmas = "\n".join(f"{MFMA} v[{16 * i}:{16 * i + 15}], v[64:65], v[66:67], v[{16 * i}:{16 * i + 15}]"
                      for i in range(4))
    return "\n".join([
        "s_load_dwordx2 s[4:5], s[0:1], 0",
        "v_lshlrev_b32 v70, 2, v0",
        "s_waitcnt lgkmcnt(0)",
        srd(8, 4, 256),
        "s_mov_b32 s12, 0",
        ".Lloop:",
        "buffer_load_dword v68, v70, s[8:11], 0 offen",
        mfmas,
        "s_waitcnt vmcnt(0)",
        "s_add_u32 s12, s12, 1",
        f"s_cmp_lt_u32 s12, {trips}",
        "s_cbranch_scc1 .Lloop",
        "s_endpgm",
    ])


def test_fast_forwarded_loop_trips_add_the_steady_trip_time():
    """A counted loop is simulated for a few trips and the rest extrapolated: the result matches
    simulating every trip."""
    mod = module(_loop_kernel(40), arch="gfx950", vgprs=72, sgprs=16)
    args = [torch.zeros(64, dtype=torch.int32)]
    fast = estimate(mod, "k", (1, 1, 1), (64, 1, 1), args, device="MI355X", detail_iterations=4)
    full = estimate(mod, "k", (1, 1, 1), (64, 1, 1), args, device="MI355X", detail_iterations=10_000)
    # simulated: 4 trips, the trip during which the counter is moved, and the last trip
    assert fast.breakdown["skipped_trips"] == 40 - 6 and full.breakdown["skipped_trips"] == 0
    assert fast.cycles == full.cycles
    assert fast.flops == full.flops == 40 * 4 * 2 * 32 * 32 * 8


def test_l2_sharers_far_apart_in_dispatch_order_miss_more():
    """Eight workgroups of one XCD (ids 0, 8, ..., 56) computing a 2 x 4 block of tiles: each touches one
    A row panel and one B column panel. Column-first order puts a column's two workgroups next to each
    other in dispatch order (B sharers 1 apart, A sharers 2 apart: 16 in all over 10 sharer pairs);
    row-first order puts a row's four together (A sharers 1 apart, B sharers 4 apart: 22). Same lines, so
    the same lockstep miss count; the row-first order's sharers are further apart, so it refetches more."""
    from tilegcn.perfmodel.l2 import hit_rate

    t = TIMING["gfx950"]

    def footprints(tiles):
        def panel(first):
            return set(range(first * 64, first * 64 + 64))
        return {(8 * pos, 1): panel(row) | panel(100 + col) for pos, (row, col) in enumerate(tiles)}

    column_first = footprints([(pos % 2, pos // 2) for pos in range(8)])
    row_first = footprints([(pos // 4, pos % 4) for pos in range(8)])
    lockstep = [hit_rate(fp, t.l2_bytes_per_xcd, t.l2_line_bytes) for fp in (column_first, row_first)]
    assert lockstep[0] == lockstep[1]
    (hit_near, _, miss_near), (hit_far, _, miss_far) = (
        hit_rate(fp, t.l2_bytes_per_xcd, t.l2_line_bytes, t.l2_refetch_base, t.l2_refetch_per_gap)
        for fp in (column_first, row_first))
    assert miss_near > lockstep[0][2]  # a later sharer may find the line evicted
    assert miss_far > miss_near and hit_far < hit_near


def test_a_partly_filled_last_round_costs_less_than_a_full_one():
    """Workgroups of 4 waves (one per SIMD) whose LDS lets 2 share a CU: 3 workgroups a CU run as a full
    round of 2 and a last round of 1, which takes about half as long (the SIMDs' MFMA pipes are the limit)."""
    t = TIMING["gfx950"]
    mod = module(_independent(8), arch="gfx950", vgprs=72, lds=t.lds_bytes_per_cu // 2, max_threads=256)
    args = [torch.zeros(64, dtype=torch.int32)]

    def cycles(per_cu):
        est = estimate(mod, "k", (per_cu * t.cus, 1, 1), (256, 1, 1), args, device="MI355X")
        assert est.breakdown["workgroups_per_cu"] == 2
        return est.cycles - t.launch_overhead_clk

    two, three, four = cycles(2), cycles(3), cycles(4)
    assert four == 2 * two
    assert three == pytest.approx(1.5 * two, rel=0.05)


def _gemm_like_footprints(k_steps_per_iteration, as_sets=False, iterations=3):
    """The trace's footprints of 32 workgroups of one XCD on an 8 x 4 block of tiles: at each K step a
    workgroup touches its A row panel's 32 lines and its B column panel's 32 lines of that step; the K
    loop runs `k_steps_per_iteration` steps an iteration (how far it is unrolled). `as_sets`: one set of
    lines per iteration (no step order inside it)."""
    fp = {}
    for pos in range(32):
        row, col = pos // 4, pos % 4
        for seg in range(iterations):
            ks = np.arange(seg * k_steps_per_iteration, (seg + 1) * k_steps_per_iteration)[:, None, None]
            panels = np.array([row, col])[None, :, None]
            lines = (np.array([0, 1 << 30])[None, :, None] + (ks * 64 + panels) * 32
                     + np.arange(32)[None, None, :]).reshape(-1)
            steps = np.repeat(ks.reshape(-1), 64)
            fp[(8 * pos, seg)] = set(lines.tolist()) if as_sets else (steps, lines)
    return fp


def test_l2_hit_rate_does_not_depend_on_how_the_k_loop_is_unrolled():
    """Four workgroups share each A panel and eight each B panel at the same K step: 384 of the 2048 lines
    requested per step are distinct, whatever the loop's unroll. In an L2 of 4096 lines, unrolled 18x, one
    iteration touches 6912 lines, more than the L2 holds, yet every reuse is a few hundred lines apart."""
    from tilegcn.perfmodel.l2 import hit_rate

    line = TIMING["gfx950"].l2_line_bytes
    for as_sets in (True, False):
        rates = [hit_rate(_gemm_like_footprints(u, as_sets), 4096 * line, line)[0] for u in (1, 18)]
        assert rates[0] == rates[1] == pytest.approx(1 - 384 / 2048)


def test_l2_misses_a_line_reused_after_more_lines_than_it_holds():
    """One workgroup reads N lines twice, one line a step: the second pass hits while N lines fit the L2."""
    from tilegcn.perfmodel.l2 import hit_rate

    t = TIMING["gfx950"]
    capacity = t.l2_bytes_per_xcd // t.l2_line_bytes

    def second_pass_hit_rate(n):
        lines = np.concatenate([np.arange(n), np.arange(n)])
        return hit_rate({(0, 0): (np.arange(2 * n), lines)}, t.l2_bytes_per_xcd, t.l2_line_bytes)

    hit, requests, misses = second_pass_hit_rate(capacity // 2)
    assert (requests, misses) == (capacity, capacity // 2)
    hit, requests, misses = second_pass_hit_rate(2 * capacity)
    assert (requests, misses) == (4 * capacity, 4 * capacity)


def _rotated_loop_kernel(trips):
    """The loop shape LLVM emits for a top-tested loop: the exit test at the head, an unconditional s_branch
    back, and an out-of-line block the body branches to and back from (as Triton's masked loads do)."""
    mfmas = "\n".join(f"{MFMA} v[{16 * i}:{16 * i + 15}], v[64:65], v[66:67], v[{16 * i}:{16 * i + 15}]"
                      for i in range(4))
    return "\n".join([
        "s_load_dwordx2 s[4:5], s[0:1], 0",
        "v_lshlrev_b32 v70, 2, v0",
        "s_waitcnt lgkmcnt(0)",
        srd(8, 4, 256),
        "s_mov_b32 s12, 0",
        ".Lhead:",
        f"s_cmp_ge_u32 s12, {trips}",
        "s_cbranch_scc1 .Lexit",
        "s_branch .Lload",
        ".Lback:",
        mfmas,
        "s_waitcnt vmcnt(0)",
        "s_add_u32 s12, s12, 1",
        "s_branch .Lhead",
        ".Lexit:",
        "s_endpgm",
        ".Lload:",
        "buffer_load_dword v68, v70, s[8:11], 0 offen",
        "s_branch .Lback",
    ])


def test_a_loop_of_any_shape_is_fast_forwarded():
    mod = module(_rotated_loop_kernel(40), arch="gfx950", vgprs=72, sgprs=16)
    args = [torch.zeros(64, dtype=torch.int32)]
    fast = estimate(mod, "k", (1, 1, 1), (64, 1, 1), args, device="MI355X", detail_iterations=4)
    full = estimate(mod, "k", (1, 1, 1), (64, 1, 1), args, device="MI355X", detail_iterations=10_000)
    assert fast.breakdown["skipped_trips"] >= 30 and full.breakdown["skipped_trips"] == 0
    assert fast.cycles == full.cycles
    assert fast.flops == full.flops == 40 * 4 * 2 * 32 * 32 * 8


def test_an_address_exchanged_through_ds_bpermute_is_estimated():
    # Triton's gfx950 MX matmuls pass global addresses between lanes with ds_bpermute_b32 before an LDS DMA:
    # the timing model's footprint run must execute lane exchanges (it skips LDS accesses), or the load reads
    # a never-written address
    body = "\n".join([
        "s_load_dwordx2 s[4:5], s[0:1], 0",
        "v_lshlrev_b32 v1, 2, v0",
        "v_sub_u32 v6, 252, v1",  # lane i reads lane 63 - i
        "s_waitcnt lgkmcnt(0)",
        "v_mov_b32 v3, s5",
        "v_add_co_u32 v2, vcc, s4, v1",
        "v_addc_co_u32 v3, vcc, 0, v3, vcc",
        "ds_bpermute_b32 v4, v6, v2",
        "ds_bpermute_b32 v5, v6, v3",
        "s_waitcnt lgkmcnt(0)",
        "global_load_dword v7, v[4:5], off",
        "s_waitcnt vmcnt(0)",
        "s_endpgm",
    ])
    _, est = _estimate(body, "gfx950", vgprs=8, sgprs=16)
    assert est.cycles > TIMING["gfx950"].hbm_latency_clk  # the load was timed, through the exchanged address
