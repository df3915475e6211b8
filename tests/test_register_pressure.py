"""The register allocator's last resort (tilegcn/amdgcn/pressure.py, docs/internals.md): a kernel whose emitted order
needs more VGPRs than the arch has compiles once its fragments' registers are cut into the pieces the instructions
name, one value per whole rewrite, and its global loads issued a few ahead of their use; the result on the emulated
device matches torch. Not attention: a fp32 accumulator summing fp16 slabs read through one fragment, four fp32
fragments combined element by element; two accumulators live together stay refused."""
import re

import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import ResourceError

SLABS, N = 3, 128


@tilegcn.jit(out_idx=[2])
def slab_sum(slabs: int, n: int, scales: tuple):
    @T.prim_func
    def main(X: T.Tensor((slabs, n, n), T.float16), Y: T.Tensor((n, n), T.float16),
             Out: T.Tensor((n, n), T.float32)):
        with T.Kernel(1, threads=128):
            acc = T.alloc_fragment((n, n), T.float32)  # 128 VGPRs a thread
            x = T.alloc_fragment((n, n), T.float16)  # 64, rewritten by each slab's copy
            y = T.alloc_fragment((n, n), T.float16)  # 64, live until the end
            T.clear(acc)
            T.copy(Y, y)
            for s in range(slabs):  # unrolled at trace time
                T.copy(X[s, :, :], x)
                for i, j in T.Parallel(n, n):
                    acc[i, j] += x[i, j] * scales[s]
            for i, j in T.Parallel(n, n):
                acc[i, j] += y[i, j]
            T.copy(acc, Out)

    return main


def test_fragment_rewritten_per_step_fits_and_computes():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(SLABS, N, N, generator=g).half()
    Y = torch.randn(N, N, generator=g).half()
    scales = (0.5, -1.25, 2.0)
    compiled = slab_sum(SLABS, N, scales).compile(X, Y, arch="gfx942")
    assert compiled.metadata["vgprs"] <= 256
    needed = re.search(r"fragment groups split.*the emitted order needs (\d+) VGPRs", compiled.ir)
    assert needed and int(needed.group(1)) > 256
    want = sum(X[s].float() * scales[s] for s in range(SLABS)) + Y.float()
    torch.testing.assert_close(compiled(X, Y), want, rtol=1e-5, atol=1e-5)


@tilegcn.jit(out_idx=[1])
def four_products(n: int):
    @T.prim_func
    def main(X: T.Tensor((4, n, n), T.float32), Out: T.Tensor((n, n), T.float32)):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((n, n), T.float32)  # 128 VGPRs a thread each: 512 in the emitted order
            b = T.alloc_fragment((n, n), T.float32)
            c = T.alloc_fragment((n, n), T.float32)
            d = T.alloc_fragment((n, n), T.float32)
            T.copy(X[0, :, :], a)
            T.copy(X[1, :, :], b)
            T.copy(X[2, :, :], c)
            T.copy(X[3, :, :], d)
            for i, j in T.Parallel(n, n):
                a[i, j] = a[i, j] * b[i, j] + c[i, j] * d[i, j]
            T.copy(a, Out)

    return main


def test_fragments_read_once_stream_through_the_registers():
    """Four 128x128 fp32 fragments loaded, then combined element by element: each loaded piece is read once, so
    with the loads issued a few ahead of their use the kernel streams instead of holding 512 VGPRs."""
    X = torch.randn(4, N, N, generator=torch.Generator().manual_seed(1))
    compiled = four_products(N).compile(X, arch="gfx950")
    assert compiled.metadata["vgprs"] <= 256 and re.search(r"emitted order needs (\d+) VGPRs", compiled.ir)
    torch.testing.assert_close(compiled(X), X[0] * X[1] + X[2] * X[3], rtol=1e-6, atol=1e-6)


@tilegcn.jit(out_idx=[1])
def two_accumulators(slabs: int, n: int):
    @T.prim_func
    def main(X: T.Tensor((slabs, n, n), T.float16), Out: T.Tensor((n, n), T.float32)):
        with T.Kernel(1, threads=128):
            total = T.alloc_fragment((n, n), T.float32)  # 128 VGPRs
            squares = T.alloc_fragment((n, n), T.float32)  # 128 more, both live until the end
            x = T.alloc_fragment((n, n), T.float16)
            T.clear(total)
            T.clear(squares)
            for s in range(slabs):
                T.copy(X[s, :, :], x)
                for i, j in T.Parallel(n, n):
                    total[i, j] += x[i, j]
                    squares[i, j] += x[i, j] * x[i, j]
            for i, j in T.Parallel(n, n):
                total[i, j] += squares[i, j]
            T.copy(total, Out)

    return main


def test_what_no_order_fits_is_still_refused():
    """Two fp32 accumulators live together (256 VGPRs) plus the slab being read: no order fits, and the error is
    the emitted order's, naming the fragments live at its peak."""
    with pytest.raises(ResourceError, match=r"register budget exceeded: needs \d+ VGPRs.*fragment total: 128"):
        two_accumulators(2, N).compile(torch.zeros(2, N, N, dtype=torch.float16), arch="gfx942")
