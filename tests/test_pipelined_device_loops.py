"""`T.Pipelined` with a trip count only the device knows (a block id, a causal bound, a dynamic K) is software
pipelined like a compile-time one (passes/pipelining.py `_pipeline_on_device`): masked copies past the end, a trip
that ends where the steps run out. Every trip count the device can pick must be right (0, 1, fewer than num_stages,
num_stages and more), with the emulator's checks on (a missing wait is refused)."""
import sys

import pytest
import torch
import torch.nn.functional as F

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError
from conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "tilelang"))
import example_gqa_fwd_bshd  # noqa: E402

ARCHES = ["gfx942", "gfx950"]
TILES, BK = 4, 32


@tilegcn.jit
def tile_range_gemm(A: T.Tensor((64, TILES * BK), "float16"), B: T.Tensor((TILES * BK, 64), "float16"),
                    C: T.Tensor((2, TILES + 1, 64, 64), "float32"), *, num_stages=3):
    """Workgroup (bx, by) sums the K tiles [0, bx) (by = 0) or [bx, TILES) (by = 1): 0 to TILES trips, by block id."""
    with T.Kernel(TILES + 1, 2, threads=128) as (bx, by):
        A_s = T.alloc_shared((64, BK), "float16")
        B_s = T.alloc_shared((BK, 64), "float16")
        acc = T.alloc_fragment((64, 64), "float32")
        T.clear(acc)
        for k in T.Pipelined(by * bx, bx + by * (TILES - bx), num_stages=num_stages):
            T.copy(A[0, k * BK], A_s)
            T.copy(B[k * BK, 0], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by, bx, :, :])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_k_loop_of_0_to_4_device_trips_over_3_stages(arch):
    """Trip counts 0 .. 4 at num_stages=3 (none, one, fewer than the stages, as many, more), starting at tile 0 or
    at tile bx, in one launch; the loop is pipelined (its copies are async copies into stages)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, TILES * BK, generator=g).half()
    b = torch.randn(TILES * BK, 64, generator=g).half()
    c = torch.full((2, TILES + 1, 64, 64), float("nan"))
    tile_range_gemm(a, b, c, arch=arch)
    for bx in range(TILES + 1):
        for by, (lo, hi) in enumerate(((0, bx), (bx, TILES))):
            hi = max(lo, hi)
            ref = a[:, lo * BK:hi * BK].float() @ b[lo * BK:hi * BK].float()
            torch.testing.assert_close(c[by, bx], ref, rtol=1e-3, atol=1e-3, msg=f"tiles [{lo}, {hi})")
    ir = tile_range_gemm.compile(a, b, c, arch=arch).ir.split("after the tile-IR passes")[1]
    assert "async_copy" in ir and "stage=2" in ir


def test_every_wait_of_the_device_loop_is_needed():
    """Delete every other s_waitcnt / s_barrier of the gfx942 loop (copies staged through VGPRs, issued first) in
    turn and run 0 .. 4 trips: the emulator must refuse each deletion (HazardError / RaceError). A wait it does not
    miss would be one the trips' exits made inexact (a step's early exit joined the back-edge once)."""
    from test_pipelining import _loop_lines, _run_edited

    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, TILES * BK, generator=g).half()
    b = torch.randn(TILES * BK, 64, generator=g).half()
    kernel = tile_range_gemm.compile(a, b, torch.zeros(2, TILES + 1, 64, 64), arch="gfx942")
    lines = kernel.asm.splitlines()
    waits = [i for i in _loop_lines(kernel.asm) if lines[i].strip().startswith(("s_waitcnt", "s_barrier"))]
    assert any("vmcnt" in lines[i] for i in waits)
    missed = [lines[i].strip() for i in waits[::2]
              if not _run_edited(lines[:i] + lines[i + 1:], kernel, "gfx942",
                                 [a, b, torch.zeros(2, TILES + 1, 64, 64)])]
    assert not missed, f"deleted and not missed: {missed}"


@pytest.mark.parametrize("arch,stages", [("gfx950", 3), ("gfx942", 2)])
def test_causal_gqa_pipelined_over_a_ragged_sequence(arch, stages):
    """TileLang's GQA forward (causal: its KV loop ends at min(ceildiv(seq, 64), bx + 1), a device value) at 200
    tokens: query tiles 0 .. 3 run 1 .. 4 KV tiles, the last ragged, against torch's causal SDPA."""
    g = torch.Generator().manual_seed(1)
    Q = torch.randn(1, 200, 2, 64, generator=g).half()
    K, V = (torch.randn(1, 200, 1, 64, generator=g).half() for _ in range(2))
    kernel = example_gqa_fwd_bshd.flashattn(1, 2, 200, 64, True, groups=2, block_M=64, block_N=64,
                                            num_stages=stages, threads=128)
    out = kernel(Q, K, V, arch=arch)
    bhsd = [x.float().transpose(1, 2).repeat_interleave(2 // x.size(2), dim=1) for x in (Q, K, V)]
    ref = F.scaled_dot_product_attention(*bhsd, is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, ref.half(), rtol=1e-2, atol=1e-2)  # upstream's tolerance
    assert f"stage={stages - 1}" in kernel.compile(Q, K, V, arch=arch).ir


def test_ping_pong_on_a_device_trip_count_is_refused():
    @tilegcn.jit
    def bad(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(bx + 2, num_stages=2, annotations={"ping_pong": True}):
                T.copy(A[0, k * 32], A_s)
            T.copy(acc, C)

    with pytest.raises(CompileError, match="device value.*drop the annotation"):
        bad.compile(torch.zeros(64, 64).half(), torch.zeros(64, 64), arch="gfx950")


ATT_TILES, ATT_BM, ATT_BN, ATT_D = 5, 128, 64, 128


@tilegcn.jit
def prefix_attention(Q: T.Tensor(((ATT_TILES + 1) * ATT_BM, ATT_D), "float16"),
                     K: T.Tensor((ATT_TILES * ATT_BN, ATT_D), "float16"),
                     V: T.Tensor((ATT_TILES * ATT_BN, ATT_D), "float16"),
                     O: T.Tensor(((ATT_TILES + 1) * ATT_BM, ATT_D), "float16")):
    """TileLang's flash-attention loop body (examples/tilelang/example_gqa_fwd_bshd.py) over the key tiles
    [0, bx): query tile bx attends to the first bx key tiles, a device trip count of 0 .. ATT_TILES."""
    scale = (1.0 / ATT_D) ** 0.5 * 1.44269504
    with T.Kernel(ATT_TILES + 1, threads=256) as bx:
        Q_shared = T.alloc_shared([ATT_BM, ATT_D], "float16")
        K_shared = T.alloc_shared([ATT_BN, ATT_D], "float16")
        V_shared = T.alloc_shared([ATT_BN, ATT_D], "float16")
        acc_s = T.alloc_fragment([ATT_BM, ATT_BN], "float32")
        acc_s_cast = T.alloc_fragment([ATT_BM, ATT_BN], "float16")
        acc_o = T.alloc_fragment([ATT_BM, ATT_D], "float32")
        scores_max = T.alloc_fragment([ATT_BM], "float32")
        scores_max_prev = T.alloc_fragment([ATT_BM], "float32")
        scores_scale = T.alloc_fragment([ATT_BM], "float32")
        scores_sum = T.alloc_fragment([ATT_BM], "float32")
        logsum = T.alloc_fragment([ATT_BM], "float32")
        T.copy(Q[bx * ATT_BM, 0], Q_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, -T.infinity("float32"))
        for k in T.Pipelined(bx, num_stages=2):
            T.copy(K[k * ATT_BN, 0], K_shared)
            T.clear(acc_s)
            T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(scores_max, scores_max_prev)
            T.fill(scores_max, -T.infinity("float32"))
            T.reduce_max(acc_s, scores_max, dim=1, clear=False)
            for i in T.Parallel(ATT_BM):
                scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
            for i in T.Parallel(ATT_BM):
                scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
            for i, j in T.Parallel(ATT_BM, ATT_BN):
                acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
            T.reduce_sum(acc_s, scores_sum, dim=1)
            for i in T.Parallel(ATT_BM):
                logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
            T.copy(acc_s, acc_s_cast)
            for i, j in T.Parallel(ATT_BM, ATT_D):
                acc_o[i, j] *= scores_scale[i]
            T.copy(V[k * ATT_BN, 0], V_shared)
            T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
        for i, j in T.Parallel(ATT_BM, ATT_D):
            acc_o[i, j] /= logsum[i]
        T.copy(acc_o, O[bx * ATT_BM, 0])


def test_attention_over_0_to_5_device_key_tiles_runs_the_in_wave_pipeline():
    """gfx950: a flash-attention KV loop whose trip count only the device knows (0 .. 5 key tiles, one launch) runs
    as the in-wave software pipeline (the next tile's softmax beside this tile's PV, P and the rescale factor in
    two copies, the last tile's PV in the copy of the trip count's parity: a branch), and every count matches torch:
    0 tiles give TileLang's 0 / 0 (NaN), as a softmax over no keys; 1 tile runs no loop trip, 2 .. 5 whole trips
    and trips left after their first step."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn((ATT_TILES + 1) * ATT_BM, ATT_D, generator=g).half()
    k, v = (torch.randn(ATT_TILES * ATT_BN, ATT_D, generator=g).half() for _ in range(2))
    out = torch.zeros_like(q)
    prefix_attention(q, k, v, out, arch="gfx950")
    for bx in range(ATT_TILES + 1):
        rows, keys = slice(bx * ATT_BM, (bx + 1) * ATT_BM), bx * ATT_BN
        if keys == 0:
            assert out[rows].isnan().all()
            continue
        ref = F.scaled_dot_product_attention(q[None, rows].float(), k[None, :keys].float(), v[None, :keys].float())
        torch.testing.assert_close(out[rows], ref[0].half(), rtol=1e-2, atol=1e-2, msg=f"{bx} key tiles")
    ir = prefix_attention.compile(q, k, v, out, arch="gfx950").ir.split("after the tile-IR passes")[1]
    assert "alloc fragment acc_s_cast_next" in ir and "exit loop unless" in ir
    assert "if Mod(" in ir


def test_causal_loop_runs_its_whole_tiles_without_the_mask_and_matches_torch():
    """gfx950, TileLang's causal GQA forward at d = 128 (128 x 64 tiles, 256 threads, two stages: the in-wave
    pipeline), 576 tokens: query tile bx runs min(9, 2 bx + 2) key tiles, of which those up to 2 bx - 1 are whole
    (left of the diagonal). Those steps run first in a loop of their own, an even number of them, whose scores start
    from the mask's 0 (`fill acc_s = 0.0`: no compare, no select), the rest in the masked loop: 0 whole steps for
    tile 0, then 0, 2, 4, 6 beside 2 to 3 masked ones, an odd key-tile count for the last; against torch."""
    g = torch.Generator().manual_seed(4)
    Q = torch.randn(1, 576, 2, 128, generator=g).half()
    K, V = (torch.randn(1, 576, 1, 128, generator=g).half() for _ in range(2))
    kernel = example_gqa_fwd_bshd.flashattn(1, 2, 576, 128, True, groups=2, block_M=128, block_N=64, num_stages=2,
                                            threads=256)
    out = kernel(Q, K, V, arch="gfx950")
    bhsd = [x.float().transpose(1, 2).repeat_interleave(2 // x.size(2), dim=1) for x in (Q, K, V)]
    ref = F.scaled_dot_product_attention(*bhsd, is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, ref.half(), rtol=1e-2, atol=1e-2)
    ir = kernel.compile(Q, K, V, arch="gfx950").ir.split("after the tile-IR passes")[1]
    loops = ir.split("    for ")[1:]
    assert len(loops) == 2 and "fill acc_s = 0.0" in loops[0] and "if_then_else" not in loops[0]
    assert "if_then_else" in loops[1] and "exit loop unless" in loops[1]
