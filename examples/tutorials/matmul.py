"""Tutorial 4: matrix multiply. C = relu(A @ B) in bf16 on matrix cores (MFMA), fp32 accumulation.

    python examples/tutorials/matmul.py
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def matmul(A, B, C, *, block_M=64, block_N=64, block_K=32, threads=256, num_stages=2):
    M, K = A.shape
    N = B.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)  # operand tiles in LDS (shared memory)
        B_s = T.alloc_shared((block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")  # the accumulator, in registers
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):  # the K loop, software-pipelined
            T.copy(A[by * block_M, k * block_K], A_s)  # region start; extent = destination shape
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)  # acc += A_s @ B_s on MFMA
        for i, j in T.Parallel(block_M, block_N):  # a fused epilogue on the accumulator
            acc[i, j] = T.max(acc[i, j], 0.0)
        T.copy(acc, C[by * block_M, bx * block_N])  # fp32 -> bf16, masked at ragged edges


def main():
    torch.manual_seed(0)
    a = torch.randn(100, 96, dtype=torch.bfloat16)  # ragged: 100 rows are not a multiple of 64
    b = torch.randn(96, 72, dtype=torch.bfloat16)
    c = torch.empty(100, 72, dtype=torch.bfloat16)
    matmul(a, b, c)
    ref = (a.float() @ b.float()).relu()
    error = (c.float() - ref).abs().max().item()
    assert error <= 2**-7 * ref.abs().max().item(), error  # bf16 output rounding
    for arch in ("gfx942", "gfx950"):  # compile for both targets; nothing runs
        kernel = matmul.compile(a, b, c, arch=arch)
        mfma = sorted({line.split()[0] for line in kernel.asm.splitlines() if line.strip().startswith("v_mfma")})
        print(f"{arch}: {mfma}, {kernel.metadata['vgprs']} VGPRs, {kernel.metadata['agprs']} AGPRs, "
              f"{kernel.metadata['lds_bytes']} bytes of LDS")
    print(f"PASS: matmul matches torch (max error {error:.3g})")


if __name__ == "__main__":
    main()
