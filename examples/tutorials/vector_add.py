"""Tutorial 1: vector add. Z = X + Y on the default device (the emulated one when no AMD GPU is visible).

    python examples/tutorials/vector_add.py
"""
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit
def vector_add(X, Y, Z, *, block=256, threads=64):
    # keyword-only arguments (block, threads) are compile-time constants: a new value compiles a new kernel
    with T.Kernel(T.ceildiv(X.shape[0], block), threads=threads) as bx:  # a 1-d grid: one block id
        x = T.alloc_fragment((block,), "float32")  # a tile in registers, spread over the 64 threads
        y = T.alloc_fragment((block,), "float32")
        T.copy(X[bx * block], x)  # global -> registers; the extent is x's shape; past the end reads 0
        T.copy(Y[bx * block], y)
        for i in T.Parallel(block):  # elementwise statements over the tile
            x[i] = x[i] + y[i]
        T.copy(x, Z[bx * block])  # registers -> global; elements past the end are not written


def main():
    n = 1000  # not a multiple of the block: the last block is ragged, with no code for it
    x, y = torch.randn(n), torch.randn(n)
    z = torch.empty(n)
    vector_add(x, y, z)  # trace, compile (or hit the disk cache), run
    torch.testing.assert_close(z, x + y)
    kernel = vector_add.compile(x, y, z)  # the same kernel, not run: its IR, assembly and metadata
    print(kernel.metadata["arch"], kernel.metadata["vgprs"], "VGPRs")
    print("\n".join(line for line in kernel.asm.splitlines() if "v_add_f32" in line))
    print("PASS: vector_add matches torch")


if __name__ == "__main__":
    main()
