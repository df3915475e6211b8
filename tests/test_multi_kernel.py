"""Several `with T.Kernel(...)` blocks in one program (TileLang's semantics: each block is its own grid launch, run
in program order, a later one seeing the earlier ones' global writes) and `T.alloc_global` scratch handed from one
block to the next; results against torch on the emulated device. Tiny kernels: the file takes a few seconds."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import ArgumentError, CompileError


@tilegcn.jit(out_idx=[1])
def sums_then_scale(M, N, block_M=16):
    """Kernel 0 writes each row's sum into scratch; kernel 1 (another grid and thread count) divides X by it."""
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        sums = T.alloc_global((M,), "float32")
        with T.Kernel(T.ceildiv(M, block_M), threads=64) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            s = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, sums[bx * block_M])
        with T.Kernel(T.ceildiv(N, 16), T.ceildiv(M, block_M), threads=128) as (bx, by):
            y = T.alloc_fragment((block_M, 16), "float32")
            s = T.alloc_fragment((block_M,), "float32")
            T.copy(X[by * block_M, bx * 16], y)
            T.copy(sums[by * block_M], s)
            for i, j in T.Parallel(block_M, 16):
                y[i, j] = y[i, j] / s[i]
            T.copy(y, Y[by * block_M, bx * 16])
    return main


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_the_second_kernel_reads_what_the_first_wrote_to_alloc_global(arch):
    x = torch.rand(40, 32) + 0.5  # ragged: 40 rows over 16-row tiles
    out = sums_then_scale(40, 32)(x, arch=arch)
    torch.testing.assert_close(out, x / x.sum(dim=1, keepdim=True))


def test_each_block_is_its_own_kernel_in_one_entry(cache_dir):
    x = torch.rand(40, 32) + 0.5
    k = tilegcn.jit(out_idx=[1])(sums_then_scale.fn)(40, 32).compile(x, arch="gfx950")  # compiled into this cache
    launches = k.metadata["kernels"]
    assert [(m["name"], m["grid"], m["block"]) for m in launches] == [
        ("main_kernel0", [3, 1, 1], [64, 1, 1]), ("main_kernel1", [2, 3, 1], [128, 1, 1])]
    assert [[a["name"] for a in m["args"]] for m in launches] == [["X", "sums"], ["X", "Y", "sums"]]
    assert "kernel main_kernel0" in k.ir and "kernel main_kernel1" in k.ir
    assert k.asm.count(".amdhsa_kernel ") == 2 and k.asm.count(".amdgpu_metadata\n") == 1
    # a fresh jit function of the same program finds the one entry holding both kernels, and runs them
    again = tilegcn.jit(out_idx=[1])(sums_then_scale.fn)(40, 32)
    torch.testing.assert_close(again(x, arch="gfx950"), x / x.sum(dim=1, keepdim=True))
    assert again.cache_stats.disk_hits == 1 and again.cache_stats.compiles == 0


def test_estimate_sums_the_launches():
    x = torch.rand(40, 32) + 0.5
    e = sums_then_scale(40, 32).compile(x, arch="gfx942").estimate()
    assert len(e.launches) == 2
    assert e.cycles == sum(launch.cycles for launch in e.launches) > max(launch.cycles for launch in e.launches)


M = T.dynamic("M")


def test_eager_style_dynamic_sizes_runtime_scalar_and_t_empty():
    @tilegcn.jit
    def shifted_twice(X, shift, block=64):
        X: T.Tensor((M,), "float32")
        Y = T.empty((M,), "float32")
        tmp = T.alloc_global((M,), "float32")
        with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                x[i] = x[i] + shift
            T.copy(x, tmp[bx * block])
        with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
            tmp_s = T.alloc_shared((block,), "float32")  # scratch allocated inside the block, TileLang allows it too
            out = T.alloc_global((block,), "float32")
            y = T.alloc_fragment((block,), "float32")
            T.copy(tmp[bx * block], y)
            for i in T.Parallel(block):
                y[i] = y[i] * 2.0
            T.copy(y, tmp_s)
            T.copy(tmp_s, Y[bx * block])
        return Y

    for n in (10, 300):
        x = torch.randn(n)
        torch.testing.assert_close(shifted_twice(x, 1.5), (x + 1.5) * 2)
    assert shifted_twice.cache_stats.traces == 1


def test_a_single_block_program_is_unchanged():
    @tilegcn.jit(out_idx=[1])
    def double(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=64):
                x = T.alloc_fragment((N,), "float32")
                T.copy(X[0], x)
                for i in T.Parallel(N):
                    x[i] = x[i] * 2.0
                T.copy(x, Y[0])
        return main

    x = torch.randn(64)
    k = double(64).compile(x)
    assert "kernels" not in k.metadata and k.name == "main" and k.ir.startswith("kernel main ")
    assert torch.equal(k(x), 2 * x)


def _nested(X):
    with T.Kernel(1, threads=64):
        with T.Kernel(1, threads=64):
            pass


def _shared_scope(X):
    T.alloc_global((64,), "float32", scope="shared")
    with T.Kernel(1, threads=64):
        pass


def _between_blocks(X):
    with T.Kernel(1, threads=64):
        pass
    T.fill(T.alloc_fragment((64,), "float32"), 0)
    with T.Kernel(1, threads=64):
        pass


def _fragment_outside_the_blocks(X):
    x = T.alloc_fragment((64,), "float32")
    with T.Kernel(1, threads=64):
        T.copy(X[0], x)
    with T.Kernel(1, threads=64):
        T.copy(x, X[0])


@pytest.mark.parametrize("body, message", [
    (_nested, r"`with T.Kernel\(...\)` inside another T.Kernel block.*close the first block"),
    (_shared_scope, r"T.alloc_global\(scope='shared'\).*T.alloc_shared"),
    (_between_blocks, r"tile statements must be inside `with T.Kernel"),
    (_fragment_outside_the_blocks, r"fragment buffer x is allocated outside the program's T.Kernel blocks"),
], ids=["nested", "scope", "statement-between-blocks", "fragment-outside-blocks"])
def test_bad_use_is_a_compile_error_at_the_line(body, message):
    program = tilegcn.jit(body)
    with pytest.raises(CompileError, match=message) as e:
        program(torch.zeros(64))
    assert __file__ in str(e.value) or "test_multi_kernel.py" in str(e.value)


def test_alloc_global_outside_a_program():
    with pytest.raises(CompileError, match="outside a @tilegcn.jit kernel"):
        T.alloc_global((4,), "float32")


def test_hand_edited_assembly_of_a_program_runs_every_kernel(tmp_path):
    x = torch.rand(40, 32) + 0.5
    k = sums_then_scale(40, 32).compile(x, arch="gfx942")
    path = tmp_path / "program.s"
    path.write_text(k.asm)  # the merged text, both kernels in it, assembled again as a hand edit would be
    torch.testing.assert_close(k.with_asm(path)(x), x / x.sum(dim=1, keepdim=True))
    with pytest.raises(ArgumentError, match="several T.Kernel blocks or T.alloc_global scratch"):
        k.with_asm(path, verify=True, args=(x,))
