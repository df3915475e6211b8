"""The timing model ranks the K-loop schedules of issue 7 (branch kloop): num_stages=2 above 1, and the
interleaved schedule above the plain one. Each test skips while this build compiles both variants to
the same code (pipelining not lowered yet) or does not have the option."""
import inspect

import pytest
import torch

import tilegcn
from tilegcn import language as T

M = N = 2048
K = 4096


@tilegcn.jit
def gemm(A, B, C, *, block_M=256, block_N=256, block_K=64, threads=256, num_stages=1, interleave=None):
    M, K = A.shape
    N = B.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.use_swizzle(panel_size=8, num_xcds=8)
        T.clear(acc)
        extra = {} if interleave is None else {"interleave": interleave}
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages, **extra):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * block_M, bx * block_N])


@pytest.fixture(scope="module")
def tensors():
    return (torch.zeros(M, K, dtype=torch.bfloat16), torch.zeros(K, N, dtype=torch.bfloat16),
            torch.zeros(M, N, dtype=torch.bfloat16))


def _pair(tensors, first, second):
    a = gemm.compile(*tensors, arch="gfx950", **first)
    b = gemm.compile(*tensors, arch="gfx950", **second)
    if a.asm.split(".rodata")[0] == b.asm.split(".rodata")[0]:
        pytest.skip(f"{second} compiles to the same code as {first} in this build")
    return a.estimate(args=list(tensors)), b.estimate(args=list(tensors))


def test_two_stages_rank_above_one(tensors):
    one, two = _pair(tensors, {"num_stages": 1}, {"num_stages": 2})
    assert two.cycles < one.cycles


def test_interleaved_schedule_ranks_above_plain(tensors):
    if "interleave" not in inspect.signature(T.Pipelined).parameters:
        pytest.skip("T.Pipelined has no interleave option in this build")
    plain, mixed = _pair(tensors, {"num_stages": 2, "interleave": False}, {"num_stages": 2, "interleave": True})
    assert mixed.cycles < plain.cycles
