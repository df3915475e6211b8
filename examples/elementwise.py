"""Y = relu(a * X + b) as a tilegcn kernel, checked against torch, with a look at the cache entry.

    python examples/elementwise.py
"""
import argparse
import os

import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def axpb_relu(X, Y, *, a=2.0, b=1.0, block_M=64, block_N=128, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(X[by * block_M, bx * block_N], x)  # bf16 -> fp32, 16-byte loads, ragged edges masked
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = T.max(x[i, j] * a + b, 0.0)
        T.copy(x, Y[by * block_M, bx * block_N])  # fp32 -> bf16, round to nearest even


def main():
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    X = torch.randn(1000, 3000, dtype=torch.bfloat16)
    Y = torch.empty_like(X)
    axpb_relu(X, Y, a=0.5)  # compile (or hit the cache), then run on the default device
    expected = torch.relu(X.float() * 0.5 + 1.0).to(torch.bfloat16)
    print("max error vs torch:", (Y.float() - expected.float()).abs().max().item())
    kernel = axpb_relu.compile(X, Y, a=0.5)
    entry = os.path.dirname(kernel.hsaco_path)
    print("cache entry:", entry, sorted(os.listdir(entry)))
    print("\n".join(kernel.asm.splitlines()[:12]))


if __name__ == "__main__":
    main()
