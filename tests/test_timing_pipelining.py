"""The timing model ranks the K-loop schedules of issue 7: num_stages=2 (software-pipelined, LDS DMA on
gfx950) above num_stages=1. (The interleaved MFMA/ds_read schedule of issue 7 item 5 does not exist yet, so
there is no interleave-vs-plain ranking to test.)"""
import pytest
import torch

from kernels import gemm  # the tests' shared GEMM tile program (tests/kernels.py)

M = N = 2048
K = 4096
TILE = dict(block_M=256, block_N=256, block_K=64, threads=256)


@pytest.fixture(scope="module")
def tensors():
    return (torch.zeros(M, K, dtype=torch.bfloat16), torch.zeros(K, N, dtype=torch.bfloat16),
            torch.zeros(M, N, dtype=torch.bfloat16))


def _pair(tensors, first, second):
    a = gemm.compile(*tensors, arch="gfx950", **TILE, **first)
    b = gemm.compile(*tensors, arch="gfx950", **TILE, **second)
    assert a.asm.split(".rodata")[0] != b.asm.split(".rodata")[0], "the two variants compiled to the same code"
    return a.estimate(args=list(tensors)), b.estimate(args=list(tensors))


def test_two_stages_rank_above_one(tensors):
    one, two = _pair(tensors, {"num_stages": 1}, {"num_stages": 2})
    assert two.cycles < one.cycles

