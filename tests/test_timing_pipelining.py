"""The timing model ranks the K-loop schedules of issue 7: num_stages=2 (software-pipelined, LDS DMA on
gfx950) above num_stages=1, and the interleaved MFMA/ds_read schedule (the default, `schedule="interleave"`)
above the plain one (`tilegcn.jit(fn, schedule="plain")`)."""
import pytest
import torch

import tilegcn
from kernels import gemm  # the tests' shared GEMM tile program (tests/kernels.py)

M = N = 2048
K = 4096
TILE = dict(block_M=256, block_N=256, block_K=64, threads=256)


@pytest.fixture(scope="module")
def tensors():
    return (torch.zeros(M, K, dtype=torch.bfloat16), torch.zeros(K, N, dtype=torch.bfloat16),
            torch.zeros(M, N, dtype=torch.bfloat16))


def _pair(tensors, first, second, first_program=gemm, second_program=gemm):
    a = first_program.compile(*tensors, arch="gfx950", **TILE, **first)
    b = second_program.compile(*tensors, arch="gfx950", **TILE, **second)
    assert a.asm.split(".rodata")[0] != b.asm.split(".rodata")[0], "the two variants compiled to the same code"
    return a.estimate(args=list(tensors)), b.estimate(args=list(tensors))


@pytest.mark.slow
def test_two_stages_rank_above_one(tensors):
    one, two = _pair(tensors, {"num_stages": 1}, {"num_stages": 2})
    assert two.cycles < one.cycles



@pytest.mark.slow
def test_interleaved_schedule_ranks_above_plain(tensors):
    plain_gemm = tilegcn.jit(gemm.fn, schedule="plain")
    plain, interleaved = _pair(tensors, {"num_stages": 2}, {"num_stages": 2}, plain_gemm, gemm)
    assert interleaved.cycles < plain.cycles
