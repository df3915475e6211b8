"""TileLang's GEMM storing C through shared memory (examples/tilelang/gemm_non_persistent.py) against the same GEMM
storing C straight from the accumulator (examples/tilelang/gemm.py's body at the same tile), at upstream's config
(128x256x64, 256 threads, num_stages=3) on a 4096^3 f16 problem: LDS bytes (C_shared takes the bytes of the A and
B stages: LDS reuse, passes/lds.py) and the timing model's estimate (MI300X for gfx942, MI355X for gfx950).

    python bench/gemm_c_through_shared.py [--size 4096] [--arch gfx942,gfx950]
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "tilelang"))

import gemm_non_persistent  # noqa: E402

import tilegcn  # noqa: E402
from tilegcn import language as T  # noqa: E402


@tilegcn.jit
def direct(A, B, block_M, block_N, block_K, threads, num_stages, dtype=T.float16, accum_dtype=T.float32):
    """matmul_non_persistent's body with C stored from the accumulator (no C_shared)."""
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

        T.use_swizzle(10)

        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)

        T.copy(C_local, C[bx * block_M, by * block_N])

    return C


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--arch", default="gfx942,gfx950")
    args = ap.parse_args()
    n = args.size
    a, b = torch.zeros(n, n, dtype=torch.float16), torch.zeros(n, n, dtype=torch.float16)
    config = dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=3)
    print(f"{'arch':8} {'kernel':22} {'lds_bytes':>9} {'vgprs':>5} {'est_us':>9} {'TFLOP/s':>8}")
    kernels = (("C through shared", gemm_non_persistent.matmul_non_persistent), ("C from accumulator", direct))
    for arch in args.arch.split(","):
        for name, fn in kernels:
            kernel = fn.compile(a, b, arch=arch, **config)
            seconds = kernel.estimate().seconds
            print(f"{arch:8} {name:22} {kernel.metadata['lds_bytes']:9d} {kernel.metadata['vgprs']:5d} "
                  f"{seconds * 1e6:9.1f} {2 * n ** 3 / seconds / 1e12:8.1f}")


if __name__ == "__main__":
    main()
