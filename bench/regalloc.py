"""Register counts of the GEMM tiles and the cost of the register allocation pass (amdgcn/regalloc.allocate).

    python bench/regalloc.py [--repeat 5] [--arch gfx950,gfx942]

Per config: the kernel's VGPRs / AGPRs / SGPRs (what the descriptor gets), its instruction count, and the medians
over --repeat runs of `compiler.lower` on the traced IR and of the allocation pass inside it, in CPU time of this
process (time.process_time: steadier than wall time on a shared machine). Target: allocate <= 5 ms on the
256x256x64 GEMM.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import torch  # noqa: E402

import kernels  # noqa: E402
import tilegcn.compiler as P  # noqa: E402
from examples.gemm.gemm import gemm as gemm_256  # noqa: E402
from tilegcn import language as T  # noqa: E402
from tilegcn.errors import ResourceError  # noqa: E402
from tilegcn.ir.types import TensorSpec  # noqa: E402

# label, JITFunction, tile M, tile N, constants (examples/gemm/gemm.py defaults to 256x256x64 and 512 threads)
CASES = [("256x256x64 (512 threads)", gemm_256, 256, 256, {}),
         ("128x128x64 (256 threads)", kernels.gemm, 128, 128, dict(block_M=128, block_N=128))]


def timed_allocate(times: list):
    real = P.allocate

    def allocate(*args, **kwargs):
        start = time.process_time()
        out = real(*args, **kwargs)
        times.append(time.process_time() - start)
        return out
    return allocate


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--arch", default="gfx950,gfx942")
    args = ap.parse_args(argv)
    alloc_times: list = []
    P.allocate = timed_allocate(alloc_times)
    print(f"{'config':<44}{'VGPRs':>7}{'AGPRs':>7}{'SGPRs':>7}{'insts':>7}{'lower ms':>10}{'alloc ms':>10}")
    for arch in args.arch.split(","):
        for label, fn, bm, bn, consts in CASES:
            for stages in (1, 2):
                for layout in ("NN", "NT"):
                    A = torch.empty(bm, 512, dtype=torch.bfloat16)
                    B = torch.empty(*((bn, 512) if layout == "NT" else (512, bn)), dtype=torch.bfloat16)
                    C = torch.empty(bm, bn, dtype=torch.bfloat16)
                    name = f"{arch} {label} {layout} s{stages}"
                    kernel = T.trace(fn.fn, [TensorSpec.of(x) for x in (A, B, C)],
                                     dict(consts, num_stages=stages, transpose_B=layout == "NT"), arch)
                    lowers = []
                    alloc_times.clear()
                    try:
                        for _ in range(args.repeat):
                            start = time.process_time()
                            meta = P.lower(kernel, arch).meta
                            lowers.append(time.process_time() - start)
                    except ResourceError as e:  # a config that does not fit (LDS) is reported, not fatal
                        print(f"{name:<44} {str(e)[:70]}")
                        continue
                    print(f"{name:<44}{meta['vgprs']:>7}{meta['agprs']:>7}{meta['sgprs']:>7}{meta['instructions']:>7}"
                          f"{statistics.median(lowers) * 1e3:>10.1f}{statistics.median(alloc_times) * 1e3:>10.2f}")


if __name__ == "__main__":
    main()
