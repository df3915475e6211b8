"""Autotune the tilegcn GEMM over 40 configs (tiles, threads, num_stages, XCD swizzle panel, the K loop's ping-pong)
for three shapes.

    python examples/gemm/autotune.py                         # ranks for MI355X (gfx950) with the timing model
    python examples/gemm/autotune.py --device MI300X --table gemm_table.json

Each shape gets a sweep: configs that cannot fit are skipped with the compiler's reason, the rest compile in
worker processes, the timing model estimates each for the device, and (for shapes small enough for the
emulated device, --verify-max-gflop) the winner runs once and is compared with the reference config. Results
are cached on disk: a second run takes the winners from there without tuning and prints only them; the
recorded tables stay available (`tilegcn tune list`, then `tilegcn tune show ID`).
"""
import argparse
import time

import torch

import tilegcn
from tilegcn import language as T

SHAPES = [(512, 512, 512), (4096, 4096, 4096), (8192, 8192, 1024)]
SPACE = tilegcn.Space(block_M=[128, 256], block_N=[128, 256], block_K=[64], threads=[256, 512],
                      num_stages=[1, 2], panel=[1, 8], ping_pong=[None, False],
                      # ping_pong=False (both wave groups in step) differs from the compiler's choice only where
                      # that is a ping-pong: 8 waves at num_stages=2 (gfx950 and gfx942)
                      prune=lambda c: "ping_pong=False is the default here" if c["ping_pong"] is False and
                      (c["threads"], c["num_stages"]) != (512, 2) else None)


def gemm_flops(A, B, C):
    return 2.0 * A.shape[0] * A.shape[1] * B.shape[1]


@tilegcn.jit
def gemm(A: T.Tensor(("M", "K")), B: T.Tensor(("K", "N")), C: T.Tensor(("M", "N")), *, block_M=256, block_N=256,
         block_K=64, threads=512, num_stages=1, panel=8, ping_pong=None):
    M, K = A.shape
    N = B.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.use_swizzle(panel_size=panel, num_xcds=8)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages, annotations={"ping_pong": ping_pong}):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * block_M, bx * block_N])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="MI355X", help="MI300X (gfx942) or MI355X (gfx950)")
    p.add_argument("--verify-max-gflop", type=float, default=1.0,
                   help="run and check the winner on the emulated device for shapes up to this many GFLOP")
    p.add_argument("--workers", type=int, default=None, help="compile processes (default: the CPU count)")
    p.add_argument("--table", help="also export the winners to this dispatch table (JSON)")
    p.add_argument("--top", type=int, default=None, help="print only the N best ranked configs (and the failures)")
    args = p.parse_args()

    # stacked on the module-level kernel, so that the compile workers can import it
    tuned = tilegcn.autotune(configs=SPACE, key=["M", "N", "K"], device=args.device, flops=gemm_flops,
                             workers=args.workers, verbose=False,
                             verify=lambda A, B, C: gemm_flops(A, B, C) <= args.verify_max_gflop * 1e9)(gemm)
    torch.manual_seed(0)
    winners = {}
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(k, n, dtype=torch.bfloat16)
        c = torch.empty(m, n, dtype=torch.bfloat16)
        start = time.perf_counter()
        winners[(m, n, k)] = tuned.tune(a, b, c)
        took = time.perf_counter() - start
        report = tuned.reports.get(tuned.key_of((a, b, c)))
        print(report.table(args.top) if report else
              f"gemm {m}x{n}x{k}: from the tuning cache, not tuned again (its table: `tilegcn tune list`, then "
              "`tilegcn tune show ID`)")
        print(f"-> {m}x{n}x{k}: {winners[(m, n, k)]} ({took:.1f} s)\n")
    print(f"{len(set(map(str, winners.values())))} different winners for {len(SHAPES)} shapes")
    if args.table:
        print(f"dispatch table: {tuned.export_table(args.table)} entries in {args.table}")


if __name__ == "__main__":
    main()
