"""Kernel signatures as TileLang writes them (issue 20, item 5): outputs the call allocates and returns
(`out_idx`, `T.empty`), compile-time constants passed by position, and TileLang's hints tilegcn ignores."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import ArgumentError, CompileError

ARCHES = ["gfx942", "gfx950"]


@tilegcn.jit(out_idx=[-1])
def double_rows(M, N, block_N=64):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=64) as bx:
            x = T.alloc_fragment((1, block_N), "float32")
            for k in T.serial(T.ceildiv(N, block_N)):
                T.copy(X[bx, k * block_N], x)
                for i, j in T.Parallel(1, block_N):
                    x[i, j] = x[i, j] * 2.0
                T.copy(x, Y[bx, k * block_N])

    return main


@pytest.mark.parametrize("arch", ARCHES)
def test_out_idx_allocates_and_returns_the_output(arch):
    x = torch.randn(3, 96)
    kernel = double_rows(3, 96)
    traces = kernel.cache_stats.traces
    y = kernel(x, arch=arch)
    assert y.shape == (3, 96) and y.dtype == torch.float32
    assert torch.equal(y, 2 * x)
    again = kernel(x, arch=arch)  # the warm path: a fresh tensor each call
    assert again is not y and torch.equal(again, 2 * x)
    assert kernel.cache_stats.traces == traces + 1
    assert torch.equal(kernel.compile(x, arch=arch)(x), 2 * x)  # a CompiledKernel returns them too


def test_out_idx_takes_an_int_and_several_outputs_come_back_in_order():
    @tilegcn.jit(out_idx=[1, -1])
    def split(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Lo: T.Tensor((N,), "float16"), Y: T.Tensor((N,), "float32"),
                 Hi: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=64):
                x = T.alloc_fragment((N,), "float32")
                y = T.alloc_fragment((N,), "float32")
                T.copy(X, x)
                T.copy(x, Lo)
                T.copy(Y, y)
                for i in T.Parallel(N):
                    x[i] = x[i] + y[i]
                T.copy(x, Hi)

        return main

    x, y = torch.randn(64), torch.randn(64)
    lo, hi = split(64)(x, y)
    assert lo.dtype == torch.float16 and torch.equal(lo, x.half())
    assert torch.equal(hi, x + y)

    @tilegcn.jit(out_idx=-1)
    def negate(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=64):
                x = T.alloc_fragment((N,), "float32")
                T.copy(X, x)
                for i in T.Parallel(N):
                    x[i] = -x[i]
                T.copy(x, Y)

        return main

    assert torch.equal(negate(64)(x), -x)


@tilegcn.jit
def twice_and_half(X, block=64):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    H = T.empty((N,), "float16")
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        x = T.alloc_fragment((block,), "float32")
        T.copy(X[bx * block], x)
        T.copy(x, H[bx * block])
        for i in T.Parallel(block):
            x[i] = x[i] * 2.0
        T.copy(x, Y[bx * block])
    return H, Y


@pytest.mark.parametrize("arch", ARCHES)
def test_t_empty_outputs_are_returned_in_the_order_of_the_return(arch):
    x = torch.randn(100)
    h, y = twice_and_half(x, arch=arch)
    assert torch.equal(y, 2 * x) and torch.equal(h, x.half())
    h, y = twice_and_half(x, 32, arch=arch)  # the constant by position
    assert torch.equal(y, 2 * x)


def test_out_idx_works_from_a_disk_cache_hit():
    x = torch.randn(2, 64)
    assert torch.equal(double_rows(2, 64)(x), 2 * x)
    double_rows(2, 64).cache_clear()  # this process forgets it; the disk entry serves the next call
    kernel = double_rows(2, 64)
    assert torch.equal(kernel(x), 2 * x)
    assert kernel.cache_stats.disk_hits == 1 and kernel.cache_stats.compiles == 0


def test_a_positional_parameter_with_a_default_is_a_constant_by_position():
    @tilegcn.jit
    def scale(X, Y, block=32, factor=3.0):
        with T.Kernel(T.ceildiv(X.shape[0], block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                x[i] = x[i] * factor
            T.copy(x, Y[bx * block])

    x, y = torch.randn(128), torch.empty(128)
    scale(x, y, 64, 2.0)
    assert torch.equal(y, 2 * x)
    assert scale.compile(x, y, 64, 2.0).constants == {"block": 64, "factor": 2.0}
    scale(x, y, factor=4.0)
    assert torch.equal(y, 4 * x)
    with pytest.raises(ArgumentError, match="both by position and by keyword"):
        scale(x, y, 64, block=64)
    with pytest.raises(ArgumentError, match="takes 2 positional argument"):
        scale(x, y, 64, 2.0, 1)


def test_tilelang_hints_are_accepted_and_ignored():
    @tilegcn.jit(pass_configs={"tl.disable_tma_lower": True}, target="hip")
    def copy_through_shared(X, Y):
        with T.Kernel(1, 1, threads=64) as (bx, by):
            T.use_swizzle(4, order="row", enable=False)
            s = T.alloc_shared((64,), "float32")
            T.copy(X, s, coalesced_width=4)
            T.copy(s, Y, coalesced_width=4)

    x, y = torch.randn(64), torch.empty(64)
    copy_through_shared(x, y)
    assert torch.equal(y, x)
    assert "swizzle" not in copy_through_shared.compile(x, y).ir  # enable=False: no remap


# -- refusals ------------------------------------------------------------------------------------------------
def _program(N=64):
    def main(X: T.Tensor((N,), "float32"), n, Y: T.Tensor(("K",), "float32")):
        pass

    return main


@pytest.mark.parametrize("out_idx, pattern", [
    (5, r"index 5 is out of range for the 3 parameter\(s\) \(X, n, Y\)"),
    ([-1, 2], "parameter Y is listed twice"),
    ([1], "parameter n is not annotated as a tensor.*a scalar cannot be an output"),
    ("Y", "out_idx is an int or a list of ints"),
])
def test_bad_out_idx_is_refused_at_decoration(out_idx, pattern):
    with pytest.raises(ArgumentError, match=pattern) as info:
        tilegcn.jit(_program(), out_idx=out_idx)
    assert "test_signatures.py" in str(info.value)


def test_an_output_whose_size_no_input_names_is_refused_at_the_call():
    kernel = tilegcn.jit(_program(), out_idx=[-1])
    with pytest.raises(ArgumentError, match=r"dimension 0 of output Y \('K'\) is not known from the inputs"):
        kernel(torch.zeros(64), 1)


def test_a_t_empty_never_returned_is_refused_at_its_line():
    @tilegcn.jit
    def lost(X):
        X: T.Tensor((64,), "float32")
        Y = T.empty((64,), "float32")  # noqa: F841 - never returned: the misuse
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64,), "float32")
            T.copy(X, x)

    with pytest.raises(CompileError, match="T.empty buffer Y is never returned") as info:
        lost(torch.zeros(64))
    assert "test_signatures.py" in str(info.value)


def test_use_swizzle_refuses_column_order():
    @tilegcn.jit
    def k(X):
        with T.Kernel(1, threads=64):
            T.use_swizzle(4, order="col")

    with pytest.raises(CompileError, match="row panels only"):
        k(torch.zeros(64))


def test_kernel_takes_threads_as_dimensions():
    @tilegcn.jit
    def copy2d(X, Y):
        with T.Kernel(T.ceildiv(X.shape[0], 4), 1, threads=(64, 2)) as (bx, by):
            x = T.alloc_fragment((4, 64), "float32")
            T.copy(X[bx * 4, by * 64], x)
            T.copy(x, Y[bx * 4, by * 64])

    x, y = torch.randn(8, 64), torch.empty(8, 64)
    copy2d(x, y)
    assert torch.equal(y, x)
    assert copy2d.compile(x, y).block == (128, 1, 1)


def test_export_refuses_a_kernel_that_returns_its_outputs(tmp_path):
    with pytest.raises(tilegcn.ExportError, match=r"returns outputs it allocates \(H, Y: out_idx or T.empty\).*"
                                                  "make each output a parameter"):
        tilegcn.aot.export(twice_and_half, [(torch.randn(64),)], ["gfx942"], tmp_path / "out")


def test_autotune_checks_the_returned_outputs_of_its_configs(capsys):
    @tilegcn.autotune(configs=[{"block": 64}, {"block": 128}])
    @tilegcn.jit
    def twice(X, *, block=64):
        N = X.shape[0]
        Y = T.empty((N,), "float32")
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                x[i] = x[i] * (2.0 if block == 64 else 3.0)  # the configs disagree: the check must see it
            T.copy(x, Y[bx * block])
        return Y

    x = torch.randn(256)
    y = twice(x)
    assert "block=64 " in capsys.readouterr().err.split("failed: output differs")[0].splitlines()[-1]
    assert torch.equal(y, 3 * x)  # the config that disagreed with the reference was dropped


def test_out_idx_on_an_eager_style_kernel():
    @tilegcn.jit(out_idx=[1])
    def shift(X, Y, block=64, by=1.0):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        Y: T.Tensor((N,), "float16")
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                x[i] = x[i] + by
            T.copy(x, Y[bx * block])

    x = torch.randn(100)
    y = shift(x, 32, 2.0)  # the constants bind by position as if Y were not a parameter
    assert y.dtype == torch.float16 and torch.equal(y, (x + 2.0).half())
