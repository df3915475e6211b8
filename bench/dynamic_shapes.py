"""The GEMM's K loop with a dynamic M (T.dynamic) against the static kernel's: loop_metrics' figures side by side.

    python bench/dynamic_shapes.py [--arch gfx942,gfx950] [--tile 256x256x64,128x128x64] [--layout NN,NT]
                                   [--stages 1,2] [--M 4096]

For each config, compiles tests/kernels.py `gemm` (static: every shape a compile) and `gemm_dynamic_m` (M declared
`T.dynamic("M")` in its annotations: one compile serves every M) for bf16 operands of M x N x K
(N = K = 8 block sizes, as loop_metrics compiles them), without running them, and prints loop_metrics' per-K=64-step
figures of each K loop (instructions, MFMAs, LDS traffic, waits, llvm-mca cycles), then the largest relative
difference over those columns. `--M` picks the M the dynamic kernel is compiled at;
the static kernel is compiled at M = 8 block sizes either way. The timing model's estimate is left out (a dynamic
kernel has no fixed grid to estimate without arguments).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench"), str(REPO / "tests")]

import torch  # noqa: E402

import kernels  # noqa: E402
import loop_metrics  # noqa: E402

COLUMNS = loop_metrics.COLUMNS + ("salu",)
HEAD = loop_metrics.HEAD + ("salu",)


def dynamic_asm(arch, tile, layout, stages, M: int, threads=256) -> str:
    """tests/kernels.py `gemm_dynamic_m`'s assembly for bf16 operands M x (8 bn) x (8 bk), compiled (not run)."""
    bm, bn, bk = tile
    N, K = bn * 8, bk * 8
    A = torch.empty(M, K, dtype=torch.bfloat16)
    B = torch.empty(*((N, K) if layout == "NT" else (K, N)), dtype=torch.bfloat16)
    C = torch.empty(M, N, dtype=torch.bfloat16)
    return kernels.gemm_dynamic_m.compile(A, B, C, arch=arch, block_M=bm, block_N=bn, block_K=bk, threads=threads,
                                          transpose_B=layout == "NT", num_stages=stages).asm


def _row(name: str, m: dict) -> str:
    return f"{name:<52}" + "".join(f"{m[c]:>9.2f}" for c in COLUMNS)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx942,gfx950")
    ap.add_argument("--tile", default="256x256x64,128x128x64")
    ap.add_argument("--layout", default="NN,NT")
    ap.add_argument("--stages", default="1,2")
    ap.add_argument("--M", type=int, default=4096, help="the M the dynamic kernel is compiled at")
    args = ap.parse_args(argv)
    print(f"{'config':<52}" + "".join(f"{h:>9}" for h in HEAD))
    worst = 0.0
    for arch in args.arch.split(","):
        for tile in args.tile.split(","):
            dims = tuple(int(x) for x in tile.split("x"))
            for layout in args.layout.split(","):
                for stages in (int(s) for s in args.stages.split(",")):
                    name = f"{arch} {tile} {layout} stages={stages}"
                    try:
                        static = loop_metrics.metrics(loop_metrics.compile_asm(arch, dims, layout, stages), arch,
                                                      dims[0], dims[1], 256)
                        dynamic = loop_metrics.metrics(dynamic_asm(arch, dims, layout, stages, args.M), arch,
                                                       dims[0], dims[1], 256)
                    except Exception as e:  # a config that does not fit (LDS) is reported, not fatal
                        print(f"{name:<52} {type(e).__name__}: {str(e)[:110]}")
                        continue
                    diff = max(abs(dynamic[c] - static[c]) / max(abs(static[c]), 1e-9) for c in COLUMNS
                               if static[c] or dynamic[c])
                    worst = max(worst, diff)
                    print(_row(f"{name} static", static))
                    print(_row(f"{name} dynamic M={args.M}", dynamic) + f"   max diff {100 * diff:.1f}%",
                          flush=True)
    print(f"largest relative difference of a K-loop figure: {100 * worst:.1f}%")


if __name__ == "__main__":
    os.environ.setdefault("TILEGCN_DEVICE", "emulator")
    main()
