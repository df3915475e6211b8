"""The timing model's loop fast-forward on loop shapes hand-written kernels use (aiter's FAv3 attention):
fast-forwarding must give what simulating every trip gives."""
import os
import sys

import torch

from tilegcn.perfmodel import estimate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "asm"))
from emukit import module, srd  # noqa: E402

MFMA = "v_mfma_f32_32x32x8_bf16"


def _masked_tail_loop(trips, unmasked):
    """A loop counted by s12 whose body also tests a second counter, s13, against the tail: the trips from
    `unmasked` on run a masking block, but the loop goes on (aiter's FAv3 masks its last KV tile that way).
    That test changes its outcome before the loop's exit test does, yet does not end the loop."""
    mfmas = "\n".join(f"{MFMA} v[{16 * i}:{16 * i + 15}], v[64:65], v[66:67], v[{16 * i}:{16 * i + 15}]"
                      for i in range(4))
    return "\n".join([
        "s_load_dwordx2 s[4:5], s[0:1], 0",
        "v_lshlrev_b32 v70, 2, v0",
        "s_waitcnt lgkmcnt(0)",
        srd(8, 4, 256),
        "s_mov_b32 s12, 0",
        "s_mov_b32 s13, 0",
        ".Lloop:",
        "buffer_load_dword v68, v70, s[8:11], 0 offen",
        f"s_cmp_lt_u32 s13, {unmasked}",
        "s_cbranch_scc1 .Lunmasked",
        "v_mov_b32 v69, 0",  # the masking block
        ".Lunmasked:",
        mfmas,
        "s_waitcnt vmcnt(0)",
        "s_add_u32 s13, s13, 1",
        "s_add_u32 s12, s12, 1",
        f"s_cmp_lt_u32 s12, {trips}",
        "s_cbranch_scc1 .Lloop",
        "s_endpgm",
    ])


def test_a_tail_mask_test_does_not_end_the_fast_forwarded_loop():
    mod = module(_masked_tail_loop(40, 30), arch="gfx950", vgprs=72, sgprs=16)
    args = [torch.zeros(64, dtype=torch.int32)]
    fast = estimate(mod, "k", (1, 1, 1), (64, 1, 1), args, device="MI355X", detail_iterations=4)
    full = estimate(mod, "k", (1, 1, 1), (64, 1, 1), args, device="MI355X", detail_iterations=10_000)
    # the mask test changes after 30 trips, the loop ends after 40: the trips skipped are the exit test's
    assert full.breakdown["skipped_trips"] == 0 and fast.breakdown["skipped_trips"] == 40 - 6
    assert fast.flops == full.flops == 40 * 4 * 2 * 32 * 32 * 8
    assert abs(fast.cycles - full.cycles) <= 0.01 * full.cycles


def _unrolled_loop(trips, valu_ops):
    """A counted loop whose trip is as long as a loop unrolled many times over (HipKittens' gfx950 GEMM: 18 K
    steps, ~2900 instructions a trip): a load, MFMAs and `valu_ops` VALU ops a trip."""
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
        *["v_add_u32 v69, 1, v69"] * valu_ops,
        "s_waitcnt vmcnt(0)",
        "s_add_u32 s12, s12, 1",
        f"s_cmp_lt_u32 s12, {trips}",
        "s_cbranch_scc1 .Lloop",
        "s_endpgm",
    ])


def test_an_unrolled_loop_is_fast_forwarded_after_two_trips():
    # a trip of 2048+ instructions (trace.LONG_TRIP) repeats its steady pattern within itself: two trips are
    # simulated, then every trip but the last is skipped; the time is what simulating every trip gives
    mod = module(_unrolled_loop(8, 2048), arch="gfx950", vgprs=72, sgprs=16)
    args = [torch.zeros(64, dtype=torch.int32)]
    fast = estimate(mod, "k", (1, 1, 1), (64, 1, 1), args, device="MI355X", detail_iterations=4)
    full = estimate(mod, "k", (1, 1, 1), (64, 1, 1), args, device="MI355X", detail_iterations=10_000)
    assert full.breakdown["skipped_trips"] == 0 and fast.breakdown["skipped_trips"] == 8 - 3
    assert fast.flops == full.flops == 8 * 4 * 2 * 32 * 32 * 8
    assert abs(fast.cycles - full.cycles) <= 0.01 * full.cycles
