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
    the study did: the emulator's bank model charges a cycle exactly where the published phases put i and j
    together."""
    arch = get_arch("gfx950")
    phase_of = {lane: p for p, lanes in enumerate(PUBLISHED_B128) for lane in lanes}
    phases = arch.lds_phases(16, True)
    lanes = torch.zeros(1, 64, dtype=torch.int64)
    for i, j in itertools.combinations(range(64), 2):
        active = torch.zeros(1, 64, dtype=torch.bool)
        active[0, i] = active[0, j] = True
        lanes.zero_()
        lanes[0, j] = arch.lds_banks * arch.lds_bank_bytes
        assert bank_conflicts(lanes, active, 16, arch.lds_banks, phases) == (phase_of[i] == phase_of[j]), (i, j)


def test_the_launch_statistics_count_gfx950_b128_reads_in_the_measured_phases():
    """Lane i reads 16 i, except lane `moved`, which reads where lane 16 does (lane 0's banks, one sweep on). Lane
    12 shares lane 0's phase (published): one extra cycle a read. Lane 4 shares lane 16's: a broadcast, free,
    though runs of 16 consecutive lanes would have put it beside lane 0. The timing model gets the same count."""
    def conflicts(moved):
        body = "\n".join(["v_and_b32 v1, 63, v0", "v_lshlrev_b32 v1, 4, v1", f"v_cmp_eq_u32 vcc, {moved}, v0",
                          "v_mov_b32 v6, 0x100", "s_nop 1", "v_cndmask_b32 v1, v1, v6, vcc"] + ["ds_read_b128 v[2:5], v1"] * 4
                         + ["s_waitcnt lgkmcnt(0)", "s_endpgm"])
        mod = module(body, arch="gfx950", vgprs=16, lds=1024)
        return mod.launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(16, dtype=torch.int32)]).lds_bank_conflicts

    assert (conflicts(4), conflicts(12), conflicts(99)) == (0, 4, 0)
    assert np.array_equal(get_arch("gfx942").lds_phases(16, True), np.arange(64) // 8)  # 32 banks: 8 lanes a phase
