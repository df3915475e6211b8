"""The timing model times a grid whose workgroups do unequal work: causal flash attention, where query tile x sees
x + 1 key tiles. It used to simulate workgroup 0 (one key tile) and extrapolate it to the whole grid, reporting a
fraction of the FLOPs and a time that meant nothing; it now samples five query tiles from first to last."""
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples" / "tilelang"))
import example_amd_flash_attn_fwd  # noqa: E402  (TileLang's AMD flash attention forward, ported)
import example_gqa_fwd_bshd  # noqa: E402  (TileLang's GQA flash attention forward, ported)

BATCH, HEADS, KV_HEADS, DIM, BLOCK = 8, 64, 8, 64, 64


def _estimate(seq, causal):
    q = torch.zeros(BATCH, seq, HEADS, DIM, dtype=torch.float16)
    kv = torch.zeros(BATCH, seq, KV_HEADS, DIM, dtype=torch.float16)
    # num_stages=1: both loops serial, so the per-tile cost is alike and the grid model alone is tested (the
    # non-causal loop is pipelined at num_stages=2, the causal one, with its runtime trip count, is not)
    kernel = example_gqa_fwd_bshd.flashattn(BATCH, HEADS, seq, DIM, causal, groups=HEADS // KV_HEADS,
                                            block_M=BLOCK, block_N=BLOCK, num_stages=1, threads=128)
    return kernel.compile(q, kv, kv, arch="gfx950").estimate()


def _tile_pairs(seq, causal):
    """(query tile, key tile) products the kernel computes per head: all of them, or those on or below the
    diagonal (the diagonal tiles are computed whole and masked)."""
    n = seq // BLOCK
    return n * (n + 1) // 2 if causal else n * n


@pytest.fixture(scope="module")
def estimates():
    seq = 1024  # 16 query tiles x 64 heads x 8 batches: 8192 workgroups, 8 per CU slot of an MI355X (4 a CU)
    return seq, _estimate(seq, False), _estimate(seq, True)


def test_causal_estimate_counts_the_problems_flops(estimates):
    seq, full, causal = estimates
    flops_per_pair = 4 * BLOCK * BLOCK * DIM * HEADS * BATCH  # Q K^T and P V of one 64 x 64 tile pair
    assert full.flops == pytest.approx(flops_per_pair * _tile_pairs(seq, False), rel=0.01)
    assert causal.flops == pytest.approx(flops_per_pair * _tile_pairs(seq, True), rel=0.02)


def test_causal_grid_takes_about_its_share_of_the_time(estimates):
    seq, full, causal = estimates
    share = _tile_pairs(seq, True) / _tile_pairs(seq, False)  # 136 / 256
    # more than its share of the tile pairs (each workgroup's prologue and epilogue, the causal mask's VALU work on
    # every tile, the grid's tail), less than the whole grid's time; extrapolating workgroup 0 (one key tile) gave
    # 16 / 136 of the pairs
    assert share * 0.85 < causal.cycles / full.cycles < 1.0
    assert "unequal work" in str(causal) and causal.breakdown["unequal_linear"]


def test_a_remapped_causal_grid_is_flagged():
    """TileLang's AMD kernel remaps its workgroup ids (T.use_swizzle): the query tile a workgroup takes is not its x,
    so five samples along x cannot stand for the grid, and the estimate says so instead of passing for a timing."""
    seq, heads = 1024, 8
    q = torch.zeros(1, seq, heads, DIM, dtype=torch.float16)
    config = dict(example_amd_flash_attn_fwd.CONFIG, num_split_q=seq // 64)
    kernel = example_amd_flash_attn_fwd.fast_flashattn(1, heads, seq, DIM, True, 1, **config)
    est = kernel.compile(q, q, q, arch="gfx950").estimate()
    assert not est.breakdown["unequal_linear"]
    assert "not a linear function of x" in str(est)


def _rows_kernel(along):
    """Workgroup (x, y) runs (its `along` id + 1) trips of four MFMAs: work that grows along x or along y."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "asm"))
    from emukit import module

    mfma = "v_mfma_f32_32x32x8_bf16"
    mfmas = "\n".join(f"{mfma} v[{16 * i}:{16 * i + 15}], v[64:65], v[66:67], v[{16 * i}:{16 * i + 15}]"
                      for i in range(4))
    body = "\n".join(["s_mov_b32 s12, 0", f"s_add_u32 s13, {'s2' if along == 'x' else 's3'}, 1", ".Lloop:", mfmas,
                      "s_add_u32 s12, s12, 1", "s_cmp_lt_u32 s12, s13", "s_cbranch_scc1 .Lloop", "s_endpgm"])
    return module(body, arch="gfx950", vgprs=72, sgprs=16, wg_ids="xy")


def test_work_that_grows_along_y_is_timed_like_work_along_x():
    """HipKittens' causal attention puts the query block in y (grid (heads, query blocks, batch)): sampling x alone
    timed every workgroup like row 0's. The same work laid out along y or along x takes about the same time."""
    from tilegcn.perfmodel import estimate

    short, long_ = 8, 64  # 512 workgroups, one wave each: 2 per CU of an MI355X
    args = [torch.zeros(64, dtype=torch.int32)]
    along_y = estimate(_rows_kernel("y"), "k", (short, long_, 1), (64, 1, 1), args, device="MI355X")
    along_x = estimate(_rows_kernel("x"), "k", (long_, short, 1), (64, 1, 1), args, device="MI355X")
    trips = short * long_ * (long_ + 1) // 2
    assert along_y.flops == pytest.approx(trips * 4 * 2 * 32 * 32 * 8, rel=0.01)
    assert along_y.cycles == pytest.approx(along_x.cycles, rel=0.1)
