"""Row reductions (T.reduce_sum / T.reduce_max along dim 1) of a bf16 matrix, by the timing model, against HBM.

    python bench/reduce_bandwidth.py [--arch gfx942,gfx950] [--size 8192] [--rows 1,2,4] [--ops sum,max]

Each workgroup of 256 threads loads `rows` whole rows into a fragment, reduces them (in-thread, across lanes,
across the 4 waves through LDS: passes/reduce.py) and stores one fp32 per row. Prints the model's time
(`kernel.estimate()`: MI300X for gfx942, MI355X for gfx950) and the bandwidth it implies (bytes read + written over
that time) as a share of the arch table's HBM bandwidth. Compiles only: no device needed.
"""
from __future__ import annotations

import argparse

import torch

import tilegcn
from tilegcn import language as T
from tilegcn.amdgcn.arch import get_arch


@tilegcn.jit
def row_reduce(X, Y, *, op="sum", rows=1, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, rows), threads=threads) as b:
        x = T.alloc_fragment((rows, N), X.dtype)
        y = T.alloc_fragment((rows,), "float32")
        T.copy(X[b * rows, 0], x)
        getattr(T, f"reduce_{op}")(x, y, dim=1)
        T.copy(y, Y[b * rows])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="gfx942,gfx950")
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--rows", default="1,2,4")
    parser.add_argument("--ops", default="sum,max")
    args = parser.parse_args()
    n = args.size
    X, Y = torch.zeros(n, n, dtype=torch.bfloat16), torch.zeros(n)
    moved = X.numel() * X.element_size() + Y.numel() * Y.element_size()
    print(f"{'arch':7} {'op':4} {'rows':>4} {'time us':>8} {'GB/s':>6} {'% HBM':>6}")
    for arch in args.arch.split(","):
        hbm = get_arch(arch).hbm_tbps * 1e12
        for op in args.ops.split(","):
            for rows in (int(r) for r in args.rows.split(",")):
                seconds = row_reduce.compile(X, Y, op=op, rows=rows, arch=arch).estimate().seconds
                print(f"{arch:7} {op:4} {rows:4d} {seconds * 1e6:8.1f} {moved / seconds / 1e9:6.0f} "
                      f"{100 * moved / seconds / hbm:6.0f}", flush=True)


if __name__ == "__main__":
    main()
