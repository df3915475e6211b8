"""T.gemm with its A operand in a fragment (TileLang's gemm_rs): an accumulator cast to 16 bits feeding the next
T.gemm, in registers where the MFMA layouts allow and through LDS where they do not (kernel.ir says which), and an A
fragment loaded from global memory; checked on the emulated device against torch."""
import itertools

import numpy as np
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError
from tilegcn.passes.gemm_plan import ds_extra_cycles, plan_gemm


@tilegcn.jit(out_idx=[3])
def _two_gemms(M, N, D, threads, policy=None):
    @T.prim_func
    def main(Q: T.Tensor((M, D), T.float16), K: T.Tensor((N, D), T.float16), V: T.Tensor((N, D), T.float16),
             O: T.Tensor((M, D), T.float32)):
        with T.Kernel(1, threads=threads):
            Q_s = T.alloc_shared((M, D), T.float16)
            K_s = T.alloc_shared((N, D), T.float16)
            V_s = T.alloc_shared((N, D), T.float16)
            s = T.alloc_fragment((M, N), T.float32)
            s_cast = T.alloc_fragment((M, N), T.float16)
            o = T.alloc_fragment((M, D), T.float32)
            T.copy(Q, Q_s)
            T.copy(K, K_s)
            T.copy(V, V_s)
            T.clear(s)
            T.clear(o)
            T.gemm(Q_s, K_s, s, transpose_B=True, policy=policy)
            T.copy(s, s_cast)
            T.gemm(s_cast, V_s, o, policy=policy)
            T.copy(o, O)
    return main


def _inputs(*rows, D=64):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(r, D, generator=g) * 0.3).half() for r in rows]


# 128 threads: 2 waves, each holding whole rows of S, so S's accumulator registers are P @ V's A operand registers
# (32x32x8 on gfx942, 32x32x16 on gfx950: 8 k per lane, in the accumulator's order); 256 threads stacked by FullRow:
# 4 waves of 16 rows, 16x16x32 MFMAs on gfx950; 256 threads in the squarest (2x2) grid split S's rows over two
# waves, which needs other waves' values: through LDS
@pytest.mark.parametrize("arch,threads,policy,route", [("gfx942", 128, None, "registers"),
                                                       ("gfx950", 128, None, "registers"),
                                                       ("gfx950", 256, "FullRow", "registers"),
                                                       ("gfx942", 256, None, "s_as0_lds")])
def test_accumulator_cast_is_the_next_gemms_a_operand(arch, threads, policy, route):
    Q, K, V = _inputs(64, 64, 64)
    kernel = _two_gemms(64, 64, 64, threads, policy)
    O = kernel(Q, K, V, arch=arch)
    P = (Q.float() @ K.float().T).half().float()  # the kernel rounds S to fp16 before the second GEMM
    torch.testing.assert_close(O, P @ V.float(), rtol=1e-3, atol=1e-3)
    assert f"convert_layout s -> s_cast via {route}" in kernel.compile(Q, K, V, arch=arch).ir


@tilegcn.jit
def _gemm_a_fragment(A, B, C, *, dtype=T.bfloat16, transpose_B=False):
    """C = A @ B with A copied from memory straight into a fragment (the MFMA operand layout); B (N, K) where
    `transpose_B`."""
    M, N, K = T.const("M, N, K")
    b_shape = (N, K) if transpose_B else (K, N)
    A: T.Tensor((M, K), dtype)
    B: T.Tensor(b_shape, dtype)
    C: T.Tensor((M, N), T.float32)
    with T.Kernel(1, threads=128):
        a = T.alloc_fragment((M, K), dtype)
        b = T.alloc_shared(b_shape, dtype)
        c = T.alloc_fragment((M, N), T.float32)
        T.clear(c)
        T.copy(A, a)
        T.copy(B, b)
        T.gemm(a, b, c, transpose_B=transpose_B)
        T.copy(c, C)


def test_a_fragment_loaded_from_global_memory():
    A, B = (x.bfloat16() for x in _inputs(64, 32, D=32))
    C = torch.zeros(64, 32)
    _gemm_a_fragment(A, B.T.contiguous(), C, arch="gfx950")
    torch.testing.assert_close(C, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)


def test_a_fragment_from_memory_takes_one_b_read_an_mfma_on_gfx950():
    """An A fragment only loaded from memory (flash attention's Q) holds a lane's 8 k of a 32x32x16 MFMA as one
    16-byte chunk, so a K-major B is read as beside a shared A: one ds_read_b128 an MFMA, no ds_read_b64 pairs
    (those stay for an accumulator cast to A, whose k order is the accumulator's)."""
    A, B = _inputs(64, 64, D=64)
    C = torch.zeros(64, 64)
    _gemm_a_fragment(A, B, C, dtype=T.float16, transpose_B=True, arch="gfx950")
    torch.testing.assert_close(C, A.float() @ B.float().T, rtol=1e-3, atol=1e-3)
    asm = _gemm_a_fragment.compile(A, B, C, dtype=T.float16, transpose_B=True, arch="gfx950").asm
    assert "ds_read_b128" in asm and "ds_read_b64 " not in asm


def test_b_reads_beside_a_loaded_a_fragment_are_conflict_free_on_gfx950():
    """Flash attention's K (QK^T's B, K-major) beside Q in registers, gfx950 128 x 64 x 128 over 256 threads: its
    ds_read_b128 of whole chunks are conflict free (the bank model, ds_extra_cycles), where the two ds_read_b64 an
    accumulator-ordered A asks for conflict."""
    lanes = np.arange(64)

    def extra(a_k_free):
        plan = plan_gemm("gfx950", "f16", 128, 64, 128, 256, transpose_B=True, num_stages=2, a_in_registers=True,
                         a_k_free=a_k_free)
        return sum(ds_extra_cycles(plan.arch, plan.operand_read_offsets("B", wave, lanes, rep, step, piece=i),
                                   piece.count * 4, read=True)
                   for wave, rep, step in itertools.product(range(plan.waves), range(plan.repeats_N),
                                                            range(plan.read_steps))
                   for i, piece in enumerate(plan.read_pieces("B")))

    assert extra(a_k_free=True) == 0 < extra(a_k_free=False)


def test_transposed_a_fragment_is_refused():
    @tilegcn.jit
    def kernel(A, C):
        A: T.Tensor((32, 64), T.float16)
        C: T.Tensor((64, 64), T.float32)
        with T.Kernel(1, threads=64):
            a = T.alloc_fragment((32, 64), T.float16)
            b = T.alloc_shared((32, 64), T.float16)
            c = T.alloc_fragment((64, 64), T.float32)
            T.copy(A, a)
            T.copy(A, b)
            T.gemm(a, b, c, transpose_A=True)

    with pytest.raises(CompileError, match="A fragment a with transpose_A"):
        kernel(torch.zeros(32, 64).half(), torch.zeros(64, 64), arch="gfx942")


@pytest.mark.parametrize("policy,grid", [(None, (1, 2)), ("FullRow", (2, 1)), ("FullCol", (1, 2))])
def test_warp_policy_shapes_the_wave_grid(policy, grid):
    """TileLang's GemmWarpPolicy: 64 x 128 over 2 waves is squarest as 1 x 2 waves; FullRow stacks them along M."""
    plan = plan_gemm("gfx942", "f16", 64, 128, 64, 128, policy=policy)
    assert (plan.waves_M, plan.waves_N) == grid


def test_unknown_warp_policy_is_refused():
    (Q,) = _inputs(64)

    @tilegcn.jit
    def kernel(A, C):
        A: T.Tensor((64, 64), T.float16)
        C: T.Tensor((64, 64), T.float32)
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 64), T.float16)
            c = T.alloc_fragment((64, 64), T.float32)
            T.copy(A, a)
            T.gemm(a, a, c, policy="rows")

    with pytest.raises(CompileError, match="use one of T.GemmWarpPolicy"):
        kernel(Q, torch.zeros(64, 64), arch="gfx942")


@pytest.mark.parametrize("dim", [64, 128])
def test_b_reads_of_a_register_a_gemm_are_conflict_free_on_gfx942(dim):
    """P @ V's V tile on gfx942 (transposed into K-major rows by the copy): its ds_read_b64 phases of 16 rows would
    pair rows r and r + 8 on the same banks under the chunk XOR alone; the rows' swapped halves keep every read and
    every copy write conflict free (the emulator's bank model, ds_extra_cycles)."""
    plan = plan_gemm("gfx942", "f16", 64, dim, 64, 128, a_in_registers=True, policy="FullRow")
    lanes = np.arange(64)
    for rep, step, piece in itertools.product(range(plan.repeats_N), range(plan.read_steps), range(2)):
        addrs = plan.operand_read_offsets("B", 0, lanes, rep, step, piece=piece)
        assert ds_extra_cycles(plan.arch, addrs, 8, read=True) == 0
    cp = plan.copy_plan("B")
    for slot, e in itertools.product(cp.write_slots, range(8)):
        addrs = np.broadcast_to(cp.lds_offsets(lanes, slot)[e], (64,))
        assert ds_extra_cycles(plan.arch, addrs, cp.write_bytes, cp.active(lanes, slot), read=False) == 0
