"""A tiled GEMM in tilegcn: C = A @ B on MFMA, compiled straight to AMDGCN and run on the default device.

    python examples/gemm/gemm.py --check                      # 512^3 bf16 on the default device
    python examples/gemm/gemm.py --arch gfx942 --m 1000 --n 1500 --k 700 --dtype float16 --transpose-b --check
"""
import argparse
import os
import time

import torch

import tilegcn
from tilegcn import language as T
from tilegcn.runtime import device_name


@tilegcn.jit
def gemm(A, B, C, *, block_M=256, block_N=256, block_K=64, num_stages=1, threads=512, transpose_B=False,
         relu=False, ping_pong=None):
    M, K = A.shape
    N = C.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_N, block_K) if transpose_B else (block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.use_swizzle(panel_size=8, num_xcds=8)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages, annotations={"ping_pong": ping_pong}):
            T.copy(A[by * block_M, k * block_K], A_s)  # region start; the extent is A_s's shape
            if transpose_B:
                T.copy(B[bx * block_N, k * block_K], B_s)  # B stored (N, K)
            else:
                T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=transpose_B)
        if relu:
            for i, j in T.Parallel(block_M, block_N):  # fused epilogue on the accumulator
                acc[i, j] = T.max(acc[i, j], 0.0)
        T.copy(acc, C[by * block_M, bx * block_N])  # fp32 -> C.dtype, masked at ragged edges


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default=None, help="gfx942 or gfx950 (default: TILEGCN_ARCH, the visible GPU, gfx950)")
    p.add_argument("--m", type=int, default=512)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--k", type=int, default=512)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--block", type=int, nargs=3, default=(256, 256, 64), metavar=("M", "N", "K"))
    p.add_argument("--threads", type=int, default=512)
    p.add_argument("--transpose-b", action="store_true", help="pass B as (N, K)")
    p.add_argument("--relu", action="store_true", help="fuse a ReLU epilogue")
    p.add_argument("--ping-pong", choices=["auto", "on", "off"], default="auto",
                   help="run the K loop's two wave groups half a K phase apart (on), in step (off), or as the arch "
                        "table says (auto: gfx950 at 512 threads, num_stages=2)")
    p.add_argument("--num-stages", type=int, default=1, help="LDS stages of the K loop (T.Pipelined num_stages)")
    p.add_argument("--check", action="store_true", help="compare with torch (fp32 reference)")
    args = p.parse_args()

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    a = torch.randn(args.m, args.k, dtype=dtype)
    b = torch.randn(args.n, args.k, dtype=dtype) if args.transpose_b else torch.randn(args.k, args.n, dtype=dtype)
    c = torch.empty(args.m, args.n, dtype=dtype)
    bm, bn, bk = args.block
    config = dict(block_M=bm, block_N=bn, block_K=bk, threads=args.threads, transpose_B=args.transpose_b,
                  relu=args.relu, num_stages=args.num_stages,
                  ping_pong={"auto": None, "on": True, "off": False}[args.ping_pong])

    start = time.perf_counter()
    kernel = gemm.compile(a, b, c, arch=args.arch, **config)
    compile_s = time.perf_counter() - start
    device = device_name()
    print(f"tilegcn GEMM {args.m}x{args.n}x{args.k} {args.dtype} on {kernel.metadata['arch']} ({device} device), "
          f"tile {bm}x{bn}x{bk}, {args.threads} threads")
    hit = gemm.cache_stats.disk_hits > 0  # served by a verified entry of the disk cache: no lowering, no LLVM
    compiled = "cache hit" if hit else f"compiled in {compile_s:.1f} s"
    print(f"compile: {compile_s * 1e3:.1f} ms ({'a disk-cache hit' if hit else 'traced, lowered and assembled'})")

    start = time.perf_counter()
    gemm(a, b, c, arch=args.arch, **config)
    print(f"run: {time.perf_counter() - start:.2f} s")
    print(f"assembly: {os.path.join(os.path.dirname(kernel.hsaco_path), 'kernel.s')}")
    if args.check:
        ref = a.float() @ (b.float().T if args.transpose_b else b.float())
        if args.relu:
            ref = ref.relu()
        err = (c.float() - ref).abs().max().item()
        rtol = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -9
        bound = rtol * ref.abs().max().item()
        print(f"max |C - torch| = {err:.4g} (bound {bound:.3g}: {args.dtype} output rounding)")
        if err > bound:
            raise SystemExit(f"FAIL: max error {err:.4g} > {bound:.3g} against torch ({compiled})")
        print(f"PASS: max error {err:.4g} <= {bound:.3g} against torch ({compiled})")


if __name__ == "__main__":
    main()
