"""Flash attention forward's KV loop as issue 21 build 3 wants it (TileLang's GQA port, examples/tilelang/
example_gqa_fwd_bshd.py, at a 128 x 64 tile over 256 threads, two stages): the K and V tiles of the next step
are in flight while this one computes (LDS DMA on gfx950, register-staged loads on gfx942), the Q tile stays in
registers for the whole loop, the scores and the output accumulate in VGPRs (no AGPR round trip per element),
nothing spills, and the results still match torch's scaled_dot_product_attention on the emulated device with
checks on. Small shapes: 3 KV tiles (a steady trip, then a drain step), head dim 64."""
import re
import sys

import pytest
import torch
import torch.nn.functional as F

import tilegcn
from tilegcn import language as T

from conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "tilelang"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

import example_gqa_fwd_bshd  # noqa: E402
from asm.emukit import run_lanes  # noqa: E402
from loop_metrics import loop_body  # noqa: E402
from test_dtypes import _same, fp32_sweep  # noqa: E402

HEADS, KV_HEADS, DIM = 4, 2, 64


def _inputs(seq):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, seq, HEADS, DIM, generator=g).half()
    k, v = (torch.randn(1, seq, KV_HEADS, DIM, generator=g).half() for _ in range(2))
    return q, k, v


def _kernel(seq):
    return example_gqa_fwd_bshd.flashattn(1, HEADS, seq, DIM, False, groups=HEADS // KV_HEADS, block_M=128,
                                          block_N=64, num_stages=2, threads=256)


def _reference(q, k, v):
    bhsd = [x.float().transpose(1, 2).repeat_interleave(HEADS // x.size(2), dim=1) for x in (q, k, v)]
    return F.scaled_dot_product_attention(*bhsd).transpose(1, 2)


@pytest.mark.parametrize("arch,seq", [("gfx950", 192), ("gfx942", 160)], ids=["gfx950-3-tiles", "gfx942-ragged"])
def test_pipelined_attention_matches_torch(arch, seq):
    """Pipelined KV loop: 3 key tiles (one steady trip of 2 steps, then one drain step); seq 160 also leaves a
    ragged last key tile (masked) and a ragged query tile."""
    q, k, v = _inputs(seq)
    out = _kernel(seq)(q, k, v, arch=arch)
    torch.testing.assert_close(out, _reference(q, k, v).half(), rtol=1e-2, atol=1e-2)  # upstream's tolerance


def test_kv_loop_streams_k_and_v_and_keeps_q_in_registers():
    """gfx950: each KV step issues the next K and V tiles by LDS DMA; Q is a fragment after the compiler's passes
    (read from LDS in no step); no accumulator goes through AGPRs; no scratch; the key-bound mask of a sequence
    that is a multiple of block_N compares nothing and leaves the scores' zeros to the MFMAs."""
    q, k, v = _inputs(192)
    compiled = _kernel(192).compile(q, k, v, arch="gfx950")
    body = loop_body(compiled.asm)
    dma = [i for i in body if i.startswith("buffer_load_dwordx4") and i.endswith(" lds")]
    assert len(dma) == 2 * 2 * 2  # 2 unrolled steps x (K, V) x 2 slots of 16 bytes per lane (64 x 64 fp16 tiles)
    assert not any(i.startswith("v_accvgpr") for i in body)
    assert not any(i.startswith("v_cmp") for i in body)
    # the scores start from 0 in the MFMA (srcC 0: one per 32 x 32 score block, 2 a wave, 2 steps), not moves
    assert len([i for i in body if i.startswith("v_mfma") and i.endswith(", 0")]) == 2 * 2
    assert not any(i.startswith("v_mov_b32") and i.endswith(", 0") for i in body)
    after_passes = compiled.ir.split("// after the tile-IR passes")[1]
    assert "alloc fragment Q_shared" in after_passes
    assert compiled.metadata["agprs"] == 0
    assert "scratch_" not in compiled.asm and compiled.metadata["lds_bytes"] == 2 * 2 * 64 * DIM * 2


def test_gfx950_packs_two_f32_into_f16_rounding_as_torch():
    """P's cast to fp16 on gfx950 is one v_cvt_pk_f16_f32 per pair (llc-22 selects it for an IEEE fptrunc of two
    floats): on the emulated device it rounds both halves to nearest even as torch does, over the edge values (ties,
    inf, NaN, denormals, past the f16 range) and a sweep of magnitudes."""
    x = fp32_sweep()
    y = x.flip(0)
    (out,) = run_lanes("v_cvt_pk_f16_f32 v20, v10, v11", [x, y], n_out=1, arch="gfx950")
    bits = out.long() & 0xFFFFFFFF
    for half, want in ((bits & 0xFFFF, x), (bits >> 16, y)):
        assert _same(half.to(torch.int16).view(torch.float16).float(), want.half().float()).all()


def test_gfx942_packs_two_f32_into_f16_in_two_instructions_rounding_as_torch():
    """P's cast to fp16 on gfx942 (no v_cvt_pk_f16_f32): v_cvt_f16_f32 into the low half, then the same conversion
    into the high half by SDWA (dst_sel:WORD_1, the low half kept): both halves round to nearest even as torch does
    over the edge values and a sweep of magnitudes, on the emulated device with its hazard checks on."""
    x = fp32_sweep()
    y = x.flip(0)
    body = ("v_cvt_f16_f32 v20, v10\n"
            "v_cvt_f16_f32_sdwa v20, v11 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:DWORD")
    (out,) = run_lanes(body, [x, y], n_out=1, arch="gfx942")
    bits = out.long() & 0xFFFFFFFF
    for half, want in ((bits & 0xFFFF, x), (bits >> 16, y)):
        assert _same(half.to(torch.int16).view(torch.float16).float(), want.half().float()).all()


def _d128(seq):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, seq, HEADS, 128, generator=g).half()
    k, v = (torch.randn(1, seq, KV_HEADS, 128, generator=g).half() for _ in range(2))
    kernel = example_gqa_fwd_bshd.flashattn(1, HEADS, seq, 128, False, groups=HEADS // KV_HEADS, block_M=128,
                                            block_N=64, num_stages=2, threads=256)
    return kernel, (q, k, v)


@pytest.mark.parametrize("seq", [64, 128, 192, 256], ids=["1-tile", "2-tiles", "3-tiles", "4-tiles"])
def test_kv_loop_runs_next_tiles_softmax_beside_this_tiles_pv(seq):
    """gfx950, head dim 128 (a K step that covers the loads: the loop waits first): each step computes the next key
    tile's scores and online softmax beside this tile's rescale and PV (FlashAttention-3's split), K loaded a step
    ahead of V, so the next tile's exp2s issue among this tile's PV MFMAs, between the same two barriers. Only P
    and the rescale factor come in two copies; the running max and sum, which the head alone carries and the
    epilogue reads, stay single, and no head runs past the last tile. Against torch: 1 key tile (no loop: the
    first head, then the last tail), 2 (a loop of one step, so the softmax's fragments stay in VGPRs), 3 (a loop
    trip of two steps, then the last tail) and 4 (a trip, a peeled step, the last tail)."""
    kernel, (q, k, v) = _d128(seq)
    torch.testing.assert_close(kernel(q, k, v, arch="gfx950"), _reference(q, k, v).half(), rtol=1e-2, atol=1e-2)
    compiled = kernel.compile(q, k, v, arch="gfx950")
    assert "scratch_" not in compiled.asm
    after_passes = compiled.ir.split("// after the tile-IR passes")[1]
    assert "alloc fragment acc_s_cast_next" in after_passes and "alloc fragment scores_scale_next" in after_passes
    assert "logsum_next" not in after_passes and "scores_max_next" not in after_passes
    if seq == 64:
        return
    assert compiled.metadata["agprs"] == 0
    body = loop_body(compiled.asm)
    barriers = [i for i, x in enumerate(body) if x.startswith("s_barrier")] + [len(body)]
    step = body[:barriers[1]]  # the first unrolled step
    mfmas = [(i, x.split()[1].rstrip(",")) for i, x in enumerate(step) if x.startswith("v_mfma")]
    score_regs = {dst for i, dst in mfmas if step[i].endswith(", 0")}  # QK^T starts its blocks from 0
    pv = [i for i, dst in mfmas if dst not in score_regs]
    exps = [i for i, x in enumerate(step) if x.startswith("v_exp_f32")]
    assert len(pv) == 16 and any(pv[0] < i < pv[-1] for i in exps)  # the next tile's exp2s among this tile's PV


def test_first_gemm_rotation_still_matches_torch(monkeypatch):
    """The fallback split (the register chain's next, pipelining.ROTATIONS): head = score init and QK^T into a
    second score fragment, tail = softmax and PV. Forced here (the LAST_GEMM cut made unavailable; a sequence length
    no other test compiles, since the jit keeps compiled kernels in memory): 2 key tiles, the last ragged (the last
    step's head computes on a masked tile into a copy nothing reads), against torch."""
    seq = 96
    from tilegcn.passes import pipelining
    monkeypatch.setattr(pipelining, "_last_accumulator_cut", lambda work: None)
    kernel, (q, k, v) = _d128(seq)
    torch.testing.assert_close(kernel(q, k, v, arch="gfx950"), _reference(q, k, v).half(), rtol=1e-2, atol=1e-2)
    after_passes = kernel.compile(q, k, v, arch="gfx950").ir.split("// after the tile-IR passes")[1]
    assert "alloc fragment acc_s_next" in after_passes and "acc_s_cast_next" not in after_passes


def test_a_tile_whose_pipeline_does_not_fit_still_compiles_serially():
    """gfx950 256 x 128 over 512 threads at d = 128, three stages, 3 key tiles: the pipelined loop (three K/V stages
    of 64 KB, 192 KB of LDS) does not fit the CU, so the loop runs serially as before build 3 (no wait_group in the
    IR). (Two stages fit since Q's registers hold a lane's k as one chunk: 256 VGPRs.)"""
    q = torch.empty(1, 384, HEADS, 128, dtype=torch.float16)
    kv = torch.empty(1, 384, KV_HEADS, 128, dtype=torch.float16)
    kernel = example_gqa_fwd_bshd.flashattn(1, HEADS, 384, 128, False, groups=HEADS // KV_HEADS, block_M=256,
                                            block_N=128, num_stages=3, threads=512)
    compiled = kernel.compile(q, kv, kv, arch="gfx950")
    assert "wait_group" not in compiled.ir and compiled.metadata["lds_bytes"] <= 160 * 1024


def test_a_256_row_tile_pipelines_at_two_stages_on_gfx950():
    """gfx950 256 x 128 over 512 threads at d = 128, two stages: Q's registers holding a lane's k as one chunk leave
    the pipelined loop room (256 VGPRs, no scratch; it ran serially before), and it still matches torch over 3 key
    tiles."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 384, HEADS, 128, generator=g).half()
    k, v = (torch.randn(1, 384, KV_HEADS, 128, generator=g).half() for _ in range(2))
    kernel = example_gqa_fwd_bshd.flashattn(1, HEADS, 384, 128, False, groups=HEADS // KV_HEADS, block_M=256,
                                            block_N=128, num_stages=2, threads=512)
    torch.testing.assert_close(kernel(q, k, v, arch="gfx950"), _reference(q, k, v).half(), rtol=1e-2, atol=1e-2)
    compiled = kernel.compile(q, k, v, arch="gfx950")
    assert "wait_group" in compiled.ir and "scratch" not in compiled.asm


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_row_max_and_min_two_elements_an_instruction_match_torch(arch):
    """The row max / min take two of a thread's elements an instruction (the softmax's row max): gfx950's
    v_maximum3_f32 / v_minimum3_f32 propagate NaN, gfx942's v_max3_f32 / v_min3_f32 drop it and a lane mask of the
    NaNs met restores it. NaN, +-inf and zeros of both signs at several positions of a thread's run, and a NaN at
    each column in turn (rows 8..135: every position of the run, the first three, a pair, the single), still give
    torch's amax / amin (compared as values: torch's amax of -0.0 and 0.0 may give either)."""
    sys.path.insert(0, str(REPO / "tests"))
    from test_reduce import run_reductions, torch_reductions

    x = torch.randn(136, 128)  # 16 elements a thread: a first three, then 6 pairs and a single
    x[0, 4], x[1, 7], x[2, 9] = float("nan"), float("nan"), float("inf")
    x[3, :] = -0.0
    x[3, 70] = 0.0
    x[4, 10:20] = float("-inf")
    x[5, 127] = float("nan")
    x[8:, :].diagonal().fill_(float("nan"))
    outs = run_reductions(x, 1, arch, block_M=8, block_N=128, threads=64)
    for op, got, want in zip(("max", "min"), outs[1:3], torch_reductions(x, 1)[1:3]):
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num()), op


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_two_waves_a_simd_raise_the_priority_of_the_mfmas_the_softmax_waits_for(arch):
    """256 x 64 over 512 threads (two waves of the workgroup on each SIMD, one barrier a KV step): in each step of
    the KV loop, QK^T's MFMAs (whose scores the softmax reads) issue at `s_setprio 1`, from the first to the last
    of them, PV's MFMAs (which only the next step reads) at 0, and the code after the loop at 0 again
    (amdgcn/priority.py); the results match torch on the emulated device (2 workgroups, 4 key tiles). At 256
    threads (one wave of a workgroup a SIMD) no s_setprio."""
    q, k, v = _inputs(256)
    kernel = example_gqa_fwd_bshd.flashattn(1, HEADS, 256, DIM, False, groups=HEADS // KV_HEADS, block_M=256,
                                            block_N=64, num_stages=2, threads=512)
    torch.testing.assert_close(kernel(q, k, v, arch=arch), _reference(q, k, v).half(), rtol=1e-2, atol=1e-2)
    asm = kernel.compile(q, k, v, arch=arch).asm
    body = loop_body(asm)
    level, levels = 0, {}
    for inst in body:
        op = inst.split()[0]
        if op == "s_setprio":
            level = int(inst.split()[1])
        elif op.startswith("v_mfma"):
            scores = inst.endswith(", 0") or inst.split()[1] in {x.split()[1] for x in body if x.endswith(", 0")}
            levels.setdefault("QK^T" if scores else "PV", set()).add(level)
    assert levels == {"QK^T": {1}, "PV": {0}}, levels
    assert level == 0  # the body ends at the normal priority: so does the code after the loop
    assert "s_setprio" not in _kernel(256).compile(q, k, v, arch=arch).asm


@tilegcn.jit
def index_masks(O1, O2, O3, O4, *, block_M=16, block_N=64, threads=64):
    """Causal-style masks: the row bx * block_M + i against the column j plus a shift, four comparisons."""
    with T.Kernel(T.ceildiv(O1.shape[0], block_M), threads=threads) as bx:
        f = T.alloc_fragment((block_M, block_N), "float32")
        for out, mask in ((O1, lambda r, j: r >= j + 66), (O2, lambda r, j: r >= j + 79),
                          (O3, lambda r, j: r < j - 20), (O4, lambda r, j: r > j + 5)):
            for i, j in T.Parallel(block_M, block_N):
                f[i, j] = T.if_then_else(mask(bx * block_M + i, j), 1.5, -T.infinity("float32"))
            T.copy(f, out[bx * block_M, 0])


def test_index_masks_against_torch_one_compare_an_element_or_none():
    """A mask comparing two index expressions that differ from element to element by constants (causal attention's
    row >= key): where the uniform part says every element is true (or false), a scalar branch writes the constant
    (a causal loop's tiles below the diagonal); else each element takes one compare and one select, the difference
    of the shared parts computed once and the select's constants moved into VGPRs once (where an add, a compare, two
    moves and a select were). Workgroups of each kind, and at the edges: rows 128..143 against `j + 66` hold one
    false element (row 128, key 63), rows 64..79 against `j + 79` one true one (row 79, key 0); shifts outside the
    inline constants' range and of both signs; both arches, against torch."""
    rows, cols = 160, 64
    r = torch.arange(rows)[:, None]
    j = torch.arange(cols)[None, :]
    wants = [r >= j + 66, r >= j + 79, r < j - 20, r > j + 5]
    for arch in ("gfx942", "gfx950"):
        outs = [torch.zeros(rows, cols) for _ in wants]
        index_masks(*outs, arch=arch)
        for got, want in zip(outs, wants):
            assert torch.equal(got, torch.where(want, 1.5, float("-inf")))
        asm = index_masks.compile(*outs, arch=arch).asm
        elements = 4 * 16 * 64 // 64  # four masks of a 16 x 64 tile over 64 lanes
        assert asm.count("every element true?") == asm.count("every element false?") == 4
        assert len(re.findall(r"^\s+v_cmp_", asm, re.M)) <= elements + 4  # (a few elements compare directly)
        assert len(re.findall(r"^\s+v_cndmask_b32", asm, re.M)) == elements
        constant_moves = len(re.findall(r"^\s+v_mov_b32 v\d+, 0x", asm, re.M))
        assert constant_moves <= 2 * elements + 2 * 4  # the two constant paths, and two a mask in the other
