"""Copy regions as TileLang writes them (language/builtins.py's T.copy): slices `A[by * bm:(by + 1) * bm, k * bk]`
(an index next to slices spans the tile's extent, TileLang's right-aligned broadcast) and dims of extent 1 between
sliced ones, the BSHD layout `Q[b, s0:s1, h, :]` copied into 2-D shared tiles and fragments, T.gemm operands
included (the flash-attention pattern: a Q tile in shared before a pipelined K loop over BSHD K tiles). On the
emulated device for gfx942 and gfx950, against torch, ragged sequence lengths included."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError

ARCHES = ["gfx942", "gfx950"]


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


def _randn(*shape, seed=0, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@tilegcn.jit
def bshd_scale(Q, O, *, block_S=16):
    """O[b, s, h, :] = 2 Q[b, s, h, :]: a BSHD region -> shared (S, D) -> fragment, scaled, -> shared -> BSHD
    region."""
    B, S, H, D = Q.shape
    with T.Kernel(T.ceildiv(S, block_S), H, B, threads=64) as (bx, by, bz):
        Q_shared = T.alloc_shared((block_S, D), Q.dtype)
        q = T.alloc_fragment((block_S, D), "float32")
        T.copy(Q[bz, bx * block_S:(bx + 1) * block_S, by, :], Q_shared)
        T.copy(Q_shared, q)
        for i, j in T.Parallel(block_S, D):
            q[i, j] = q[i, j] * 2.0
        T.copy(q, Q_shared)
        T.copy(Q_shared, O[bz, bx * block_S:(bx + 1) * block_S, by, :])


@pytest.mark.parametrize("arch", ARCHES)
def test_bshd_rows_of_one_head_through_shared_and_a_fragment_and_back(arch):
    q = _randn(2, 40, 3, 32)  # 40 = 2.5 tiles of 16: the last tile's rows past S are neither read nor written
    base = torch.full((2, 48, 3, 32), 7.0, dtype=torch.float16)
    o = base[:, :40]
    bshd_scale(q, o, arch=arch)
    assert torch.equal(o, q * 2)
    assert (base[:, 40:] == 7).all()


@tilegcn.jit
def bshd_scores(Q, K, Out, *, block_M=32, block_N=32):
    """Out[b, h, s, t'] = sum over key tiles of Q[b, s, h, :] . K[b, t, h, :] (t = t' + 32 n): Q's tile copied
    into shared once, K's tiles pipelined, both BSHD regions, K transposed by T.gemm."""
    B, S, H, D = Q.shape
    with T.Kernel(T.ceildiv(S, block_M), H, B, threads=128) as (bx, by, bz):
        Q_shared = T.alloc_shared((block_M, D), Q.dtype)
        K_shared = T.alloc_shared((block_N, D), K.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(S, block_N), num_stages=2):
            T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
            T.gemm(Q_shared, K_shared, acc, transpose_B=True)
        T.copy(acc, Out[bz, by, bx * block_M:(bx + 1) * block_M, :])


@pytest.mark.parametrize("arch", ARCHES)
def test_bshd_gemm_operands_with_q_staged_before_the_k_loop(arch):
    q, k = _randn(2, 48, 3, 32), _randn(2, 48, 3, 32, seed=1)  # 48 keys: the second K tile is half past the end
    out = torch.empty(2, 3, 48, 32)
    bshd_scores(q, k, out, arch=arch)
    scores = torch.einsum("bshd,bthd->bhst", q.float(), k.float())
    expected = scores[..., :32] + torch.nn.functional.pad(scores[..., 32:], (0, 16))
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)


@tilegcn.jit
def column_tiles(A, Y, *, block_M=16, block_K=32):
    """Y = A tile by tile, each region written `A[by * bm:(by + 1) * bm, k * bk]` (the index k * bk spans bk)."""
    M, K = A.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=64) as by:
        A_shared = T.alloc_shared((block_M, block_K), A.dtype)
        for k in T.serial(T.ceildiv(K, block_K)):
            T.copy(A[by * block_M:(by + 1) * block_M, k * block_K], A_shared)
            T.copy(A_shared, Y[by * block_M:(by + 1) * block_M, k * block_K])


@pytest.mark.parametrize("arch", ARCHES)
def test_an_index_next_to_a_slice_spans_the_tiles_extent(arch):
    a = _randn(40, 96)
    y = torch.zeros_like(a)
    column_tiles(a, y, arch=arch)
    assert torch.equal(y, a)


def test_a_slice_that_does_not_fit_the_tile_names_its_dim():
    @tilegcn.jit
    def short_rows(Q, O):
        B, S, H, D = Q.shape
        with T.Kernel(1, threads=64) as bx:
            Q_shared = T.alloc_shared((16, D), Q.dtype)
            T.copy(Q[0, 0:8, 0, :], Q_shared)
            T.copy(Q_shared, O[0, 0:16, 0, :])

    q = _randn(1, 16, 1, 32)
    with pytest.raises(CompileError, match=r"Q slice extent 8 on dim 1 does not match the tile's 16"):
        short_rows(q, torch.empty_like(q), arch="gfx942")


def test_a_gemm_operand_whose_columns_are_not_the_tensors_last_dim_is_refused():
    @tilegcn.jit
    def heads_last(Q, K, Out):
        B, S, D, H = K.shape
        with T.Kernel(1, threads=128) as bx:
            Q_shared = T.alloc_shared((32, 32), Q.dtype)
            K_shared = T.alloc_shared((32, 32), K.dtype)
            acc = T.alloc_fragment((32, 32), "float32")
            T.copy(Q[0, 0:32, 0, :], Q_shared)
            T.copy(K[0, 0:32, :, 0], K_shared)
            T.gemm(Q_shared, K_shared, acc, transpose_B=True)
            T.copy(acc, Out[0, 0])

    q, k = _randn(1, 32, 1, 32), _randn(1, 32, 32, 1)
    with pytest.raises(CompileError, match=r"tests/test_copy_regions.py:\d+: copy into K_shared\[32, 32\] from a 4-d "
                                           r"tile \(1, 32, 32, 1\); expected a \(32, 32\) tile .*last dim"):
        heads_last(q, k, torch.empty(32, 32), arch="gfx942")
