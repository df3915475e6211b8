"""The timing model's ranking of GEMM tile configs at 8192^3 bf16 (issue 9: 256x256 above 128x128).

    python bench/tile_ranking.py [--arch gfx950|gfx942] [--transpose-b]

Compiles examples/gemm/gemm.py (B stored (K, N), or (N, K) with --transpose-b) per (tile, threads, num_stages) and
prints the model's estimate
for MI355X (gfx950) or MI300X (gfx942): cycles, TFLOP/s at the model's sustained clock, occupancy, MFMA-pipe
busy %, L1 (TCP) busy %, vmcnt and barrier stalls, L2 hit rate and the limiting resource. Configs the compiler
refuses (registers, LDS) say why.
"""
import argparse
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples", "gemm")]

from gemm import gemm  # noqa: E402
from tilegcn import TilegcnError  # noqa: E402
from tilegcn.amdgcn.arch import TIMING  # noqa: E402

SIZE = 8192
# tile, threads, stages: 256x256 on 8 waves (2 a SIMD) and on 4 (1 a SIMD), 128x128 at 1 to 4 workgroups a CU
CONFIGS = ((256, 512, 2), (256, 512, 1), (256, 256, 2), (128, 256, 2), (128, 256, 1), (128, 512, 2))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="gfx950", choices=sorted(TIMING))
    p.add_argument("--transpose-b", action="store_true", help="B stored (N, K), as the Gluon and aiter kernels")
    args = p.parse_args()
    arch = args.arch
    a = torch.zeros(SIZE, SIZE, dtype=torch.bfloat16)
    b, c = a.clone(), a.clone()
    for tile, threads, stages in CONFIGS:
        label = f"{tile}x{tile} threads={threads} num_stages={stages}"
        start = time.perf_counter()
        try:
            k = gemm.compile(a, b, c, block_M=tile, block_N=tile, num_stages=stages, threads=threads, arch=arch,
                             transpose_B=args.transpose_b)
            est = k.estimate(device=TIMING[arch].device, args=[a, b, c])
        except TilegcnError as err:
            print(f"{label:36} refused: {str(err).split(': ', 1)[-1][:120]}")
            continue
        bd = est.breakdown
        print(f"{label:36} {est.cycles / 1e6:6.3f} M cycles {est.tflops:6.0f} TFLOP/s  "
              f"{bd['workgroups_per_cu']} WG/CU  MFMA {bd['mfma_busy_pct']:3.0f} %  TCP {bd['l1_util_pct']:3.0f} %  "
              f"vmcnt {bd['stall_vmcnt_pct']:3.0f} %  barrier {bd['stall_barrier_pct']:3.0f} %  "
              f"L2 hit {bd['l2_hit_rate']:.1%}  ({bd['limiting']}; {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
