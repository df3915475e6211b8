"""T.cumsum of 64x64 fp32 fragment tiles (8192x1024, 256 threads) along dim 0 and dim 1 by the timing model, next to
a plain copy of the same tiles through fragments (what the loads and stores alone cost).

    PYTHONPATH=$PWD python bench/cumsum_estimate.py

Prints the model's cycles and what limits each kernel (`CompiledKernel.estimate()`, docs/timing.md), per arch.
"""
import pathlib
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import tilegcn  # noqa: E402
from tilegcn import language as T  # noqa: E402
from test_cumsum import cumsum_tiles  # noqa: E402


@tilegcn.jit
def copy_tiles(X, Y, *, block_M=64, block_N=64, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), X.dtype)
        T.copy(X[by * block_M, bx * block_N], x)
        T.copy(x, Y[by * block_M, bx * block_N])


def _summary(estimate) -> str:
    lines = str(estimate).splitlines()
    cycles = next(line for line in lines if line.strip().startswith("cycles"))
    limit = next(line for line in lines if line.strip().startswith("limited by"))
    return f"{cycles.split(None, 1)[1].strip()}; {limit.strip()}"


def main():
    x = torch.randn(8192, 1024)
    y = torch.empty_like(x)
    for arch in ("gfx942", "gfx950"):
        print(f"{arch} copy:        {_summary(copy_tiles.compile(x, y, arch=arch).estimate())}")
        for dim in (0, 1):
            kernel = cumsum_tiles.compile(x, y, block_M=64, block_N=64, threads=256, dim=dim, arch=arch)
            print(f"{arch} cumsum dim {dim}: {_summary(kernel.estimate())}")


if __name__ == "__main__":
    main()
