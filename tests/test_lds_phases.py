"""gfx950's ds_read_b128 lane phases, one fact (Arch.lds_phases) for the emulator's launch statistics, the timing
model and the compiler's layout checks, against the published measurement: HipKittens' rocprofv3 study on an MI355X
(S21p in docs/timing-sources.md; HazyResearch/HipKittens commit f09e968,
analysis/paper_experiments/phases/ds_read_b128/phase_results.txt and ds_read_b64/phase_results.txt). Every pair of
lanes read one bank at distinct dwords; the counter said which pairs conflict, i.e. share a phase."""
import itertools
import os
import sys

import numpy as np
import torch

from tilegcn.amdgcn.arch import get_arch
from tilegcn.passes.gemm_plan import ds_extra_cycles, plan_gemm
from tilegcn.runtime.emulator.stats import bank_conflicts

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "asm"))
from emukit import module  # noqa: E402

# phase_results.txt as published (the lanes of each phase)
PUBLISHED_B128 = ([0, 1, 2, 3, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25, 26, 27],
                  [4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 28, 29, 30, 31],
                  [32, 33, 34, 35, 44, 45, 46, 47, 52, 53, 54, 55, 56, 57, 58, 59],
                  [36, 37, 38, 39, 40, 41, 42, 43, 48, 49, 50, 51, 60, 61, 62, 63])
PUBLISHED_B64 = (list(range(32)), list(range(32, 64)))


def _partition(phases):
    return sorted(sorted(np.flatnonzero(np.asarray(phases) == p).tolist()) for p in set(phases))


def test_the_arch_table_holds_the_published_phases():
    gfx950 = get_arch("gfx950")
    assert _partition(gfx950.lds_phases(16, True)) == sorted(PUBLISHED_B128)
    assert _partition(gfx950.lds_phases(8, True)) == sorted(PUBLISHED_B64)


def test_the_emulators_bank_model_conflicts_exactly_the_published_lane_pairs():
    """Every pair of lanes i < j alone reading bank 0 (lane i at dword 0, lane j one sweep of the 64 banks on), as
    the study did, one wave a pair: the emulator's bank model charges a cycle exactly where the published phases put
    i and j together. A wave of two lanes costs 0 or 1, so the pairs published as one phase must cost one each in
    total and the others nothing."""
    arch = get_arch("gfx950")
    phase_of = {lane: p for p, lanes in enumerate(PUBLISHED_B128) for lane in lanes}
    pairs = list(itertools.combinations(range(64), 2))
    for together in (True, False):
        chosen = torch.tensor([p for p in pairs if (phase_of[p[0]] == phase_of[p[1]]) == together])
        waves = torch.arange(len(chosen))
        active = torch.zeros(len(chosen), 64, dtype=torch.bool)
        active[waves, chosen[:, 0]] = active[waves, chosen[:, 1]] = True
        addr = torch.zeros(len(chosen), 64, dtype=torch.int64)
        addr[waves, chosen[:, 1]] = arch.lds_banks * arch.lds_bank_bytes
        cycles = bank_conflicts(addr, active, 16, arch.lds_banks, arch.lds_phases(16, True))
        assert cycles == (len(chosen) if together else 0)
    assert len(pairs) == 2016 and sum(phase_of[i] == phase_of[j] for i, j in pairs) == 4 * 120


def test_the_launch_statistics_count_gfx950_b128_reads_in_the_measured_phases():
    """Lane i reads 16 i, except lane `moved`, which reads where lane 16 does (lane 0's banks, one sweep on). Lane
    12 shares lane 0's phase (published): one extra cycle a read. Lane 4 shares lane 16's: a broadcast, free,
    though runs of 16 consecutive lanes would have put it beside lane 0 (the timing model's charge of the same reads:
    tests/test_perfmodel_issue.py)."""
    def conflicts(moved):
        body = "\n".join(["v_and_b32 v1, 63, v0", "v_lshlrev_b32 v1, 4, v1", f"v_cmp_eq_u32 vcc, {moved}, v0",
                          "v_mov_b32 v6, 0x100", "s_nop 1", "v_cndmask_b32 v1, v1, v6, vcc"]
                         + ["ds_read_b128 v[2:5], v1"] * 4
                         + ["s_waitcnt lgkmcnt(0)", "s_endpgm"])
        mod = module(body, arch="gfx950", vgprs=16, lds=1024)
        return mod.launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(16, dtype=torch.int32)]).lds_bank_conflicts

    assert (conflicts(4), conflicts(12), conflicts(99)) == (0, 4, 0)
    assert np.array_equal(get_arch("gfx942").lds_phases(16, True), np.arange(64) // 8)  # 32 banks: 8 lanes a phase


def test_gfx950_gemm_reads_of_64_byte_rows_are_conflict_free_in_the_measured_phases():
    """16x16 MFMA reads (dim 16: lane bit 4 picks the next chunk, not a row) of 64-byte K-major rows, the tiles that
    conflicted 2-way under the measured phases with the swizzle planned for consecutive lanes, and a 32x32 one
    (dim 32) of the same rows: every ds_read_b128 of every wave is conflict free (gemm_plan's swizzle, module doc
    point 4)."""
    lanes = np.arange(64)
    cases = (("float8_e4m3fn", (32, 64, 64), 16), ("bf16", (32, 64, 32), 16), ("bf16", (64, 64, 32), 32))
    for dtype, tile, dim in cases:
        plan = plan_gemm("gfx950", dtype, *tile, 256, False, True, num_stages=1)
        assert (plan.dim, plan.row_bytes) == (dim, 64)
        for w, step in itertools.product(range(plan.waves), range(plan.read_steps)):
            for rd in plan.reads(step):
                for index, piece in enumerate(plan.read_pieces(rd.operand)):
                    off = plan.operand_read_offsets(rd.operand, w, lanes, rd.rep, step, piece=index)
                    assert ds_extra_cycles("gfx950", off, 4 * piece.count, read=True) == 0, (dtype, tile, rd, w)
