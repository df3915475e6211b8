"""Dynamic shapes (issue 20, item 6): a dimension declared `T.dynamic` compiles once per divisibility class of its size
by 16 and serves every value; the grid, the ragged-edge masks and the strides over it come from the call's shapes."""
import sys

import pytest
import torch

import kernels
import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError
from conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "tilelang"))
import dynamic_gemm  # noqa: E402

ARCHES = ["gfx942", "gfx950"]
M, N = T.dynamic("M, N")


def _entries(cache_dir) -> int:
    """Compiled kernels in the test's disk cache (one folder per entry, under a 2-character shard)."""
    return sum(1 for shard in cache_dir.iterdir() if len(shard.name) == 2 and shard.is_dir()
               for entry in shard.iterdir() if not entry.name.startswith("."))


@tilegcn.jit
def twice(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16"), *, block_M=32, block_N=64):
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=64) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(X[by * block_M, bx * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = x[i, j] * 2.0 + 1.0
        T.copy(x, Y[by * block_M, bx * block_N])


@pytest.mark.parametrize("arch", ARCHES)
def test_a_dynamic_elementwise_kernel_compiles_once_per_divisibility_class(arch, cache_dir):
    # ragged in both dims, rows of a runtime stride (N); N is not a multiple of 16 in these: one class
    for rows, cols in ((5, 7), (100, 130), (33, 1)):
        x = torch.randn(rows, cols).half()
        y = torch.full_like(x, 7.0)
        twice(x, y, arch=arch)
        torch.testing.assert_close(y, (2 * x.float() + 1).half(), rtol=0, atol=0)
    assert _entries(cache_dir) == 1
    x = torch.randn(64, 48).half()  # N a multiple of 16: the other class (M's divisibility changes nothing)
    y = torch.empty_like(x)
    twice(x, y, arch=arch)
    torch.testing.assert_close(y, (2 * x.float() + 1).half(), rtol=0, atol=0)
    assert _entries(cache_dir) == 2


def test_a_dynamic_size_is_a_kernel_argument_and_the_grid_its_expression():
    x = torch.randn(40, 70).half()
    kernel = twice.compile(x, torch.empty_like(x), arch="gfx950")
    assert "param M: dynamic size M = X.shape[0]" in kernel.ir
    assert [a["name"] for a in kernel.metadata["args"]] == ["X", "Y", "M", "N"]
    assert kernel.grid[:2] == ("ceiling(N/64)", "ceiling(M/32)")
    assert kernel.grid_for([x, x]) == (2, 2, 1)
    y = torch.zeros(3, 200).half()  # another size of the same class runs on the same CompiledKernel
    kernel(torch.ones(3, 200).half(), y)
    assert torch.equal(y, torch.full((3, 200), 3.0).half())


def test_a_strided_view_keeps_its_strides_specialised():
    base = torch.randn(20, 100).half()
    x = base[:, :70]  # row stride 100, not the contiguous 70: a specialisation of its own, still correct
    y = torch.empty(20, 70).half()
    twice(x, y, arch="gfx942")
    torch.testing.assert_close(y, (2 * x.float() + 1).half(), rtol=0, atol=0)


@pytest.mark.parametrize("arch", ARCHES)
def test_a_dynamic_m_gemm_serves_every_m_with_one_compile(arch, cache_dir):
    torch.manual_seed(0)
    K_, N_ = 64, 32
    B = torch.randn(K_, N_).bfloat16()
    for rows in (1, 7, 64, 1000, 4096):
        A = torch.randn(rows, K_).bfloat16()
        C = torch.zeros(rows, N_).bfloat16()
        kernels.gemm_dynamic_m(A, B, C, block_M=64, block_N=32, block_K=32, threads=128, arch=arch)
        torch.testing.assert_close(C.float(), A.float() @ B.float(), rtol=2e-2, atol=2e-2)
    assert _entries(cache_dir) == 1  # M is only an outermost dim: its divisibility changes no code


def test_an_output_the_call_allocates_takes_the_dynamic_size():
    @tilegcn.jit(out_idx=[-1])
    def plus_one(X: T.Tensor((M, 64), "float32"), Y: T.Tensor((M, 64), "float32"), *, block_M=16):
        with T.Kernel(T.ceildiv(M, block_M), threads=64) as bx:
            x = T.alloc_fragment((block_M, 64), "float32")
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, 64):
                x[i, j] = x[i, j] + 1.0
            T.copy(x, Y[bx * block_M, 0])

    for rows in (3, 21):
        x = torch.randn(rows, 64)
        assert torch.equal(plus_one(x), x + 1)
    assert plus_one.cache_stats.traces == 1


def test_the_eager_style_reads_dynamic_sizes_from_the_body():
    @tilegcn.jit
    def scaled(X, block=64):
        L = T.dynamic("L")
        X: T.Tensor((L,), "float32")
        Y = T.empty((L,), "float32")
        with T.Kernel(T.ceildiv(L, block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                x[i] = x[i] * 3.0
            T.copy(x, Y[bx * block])
        return Y

    for n in (10, 300):
        x = torch.randn(n)
        assert torch.equal(scaled(x), 3 * x)
    assert scaled.cache_stats.traces == 1


@pytest.mark.parametrize("what, body, expected", [
    ("alloc", lambda X: T.alloc_fragment((M, 64), "float32"), "buffer shape"),
    ("parallel", lambda X: [None for _ in T.Parallel(M)], "T.Parallel extent"),
])
def test_what_cannot_be_dynamic_is_refused_naming_the_size(what, body, expected):
    @tilegcn.jit
    def refused(X: T.Tensor((M, 64), "float32")):
        with T.Kernel(T.ceildiv(M, 64), threads=64):
            body(X)

    with pytest.raises(CompileError, match=f"{expected}.*dynamic size M.*T.ceildiv") as e:
        refused(torch.zeros(8, 64))
    assert e.value.location and __file__ in e.value.location


def test_threads_and_use_swizzle_refuse_a_dynamic_size():
    @tilegcn.jit
    def by_threads(X: T.Tensor((M, 64), "float32")):
        with T.Kernel(1, threads=M):
            pass

    @tilegcn.jit
    def swizzled(X: T.Tensor((M, 64), "float32")):
        with T.Kernel(2, T.ceildiv(M, 64), threads=64):
            T.use_swizzle(panel_size=4)

    with pytest.raises(CompileError, match="threads must be known at compile time.*dynamic size M"):
        by_threads(torch.zeros(64, 64))
    with pytest.raises(CompileError, match="T.use_swizzle: the grid depends on the dynamic size M.*drop T.use_swizzle"):
        swizzled(torch.zeros(64, 64))


def test_a_gemm_operand_row_of_dynamic_length_must_be_a_multiple_of_16():
    @tilegcn.jit
    def gemm_n(A, B: T.Tensor((64, N)), C: T.Tensor((32, N))):
        with T.Kernel(T.ceildiv(N, 32), threads=64) as bx:
            A_s = T.alloc_shared((32, 64), A.dtype)
            B_s = T.alloc_shared((64, 32), B.dtype)
            acc = T.alloc_fragment((32, 32), "float32")
            T.clear(acc)
            T.copy(A[0, 0], A_s)
            T.copy(B[0, bx * 32], B_s)
            T.gemm(A_s, B_s, acc)
            T.copy(acc, C[0, bx * 32])

    A = torch.randn(32, 64).half()
    B = torch.randn(64, 48).half()
    C = torch.empty(32, 48).half()
    gemm_n(A, B, C, arch="gfx950")  # N = 48: a multiple of 16
    torch.testing.assert_close(C.float(), A.float() @ B.float(), rtol=2e-2, atol=2e-2)
    with pytest.raises(CompileError, match="dynamic size.*not a multiple of 16.*pad"):
        gemm_n(A, torch.randn(64, 40).half(), torch.empty(32, 40).half(), arch="gfx950")


@pytest.mark.parametrize("arch", ARCHES)
def test_tilelang_dynamic_m_gemm_port(arch, cache_dir, monkeypatch):
    # upstream's test_cython_dynamic_shape case (T.dynamic("m"), fp16 in and out, fp32 accumulation, 2 stages) on a
    # smaller problem: N = K = 64 in 64x64x32 tiles; two M of one divisibility class share one compile
    monkeypatch.setenv("TILEGCN_ARCH", arch)
    for m in (100, 37):
        dynamic_gemm.run_cython_dynamic_shape(T.dynamic("m"), 64, 64, False, False, T.float16, T.float16, T.float32,
                                              64, 64, 32, 2, sizes=(m, 64, 64))
    assert _entries(cache_dir) == 1


def test_the_launch_checks_overlaps_at_the_calls_sizes():
    x = torch.randn(9, 64).half()
    expected = (2 * x.float() + 1).half()
    twice(x, x, arch="gfx950")  # in place: the very same view
    torch.testing.assert_close(x, expected, rtol=0, atol=0)
    base = torch.randn(10, 64).half()
    with pytest.raises(tilegcn.ArgumentError, match="Y is written by the kernel and overlaps tensor X"):
        twice(base[:8], base[1:9], arch="gfx950")


def test_a_gemm_operand_with_a_runtime_row_stride():
    # A given as (K, M) (trans_A): its row stride is M, read from the call; gfx950 copies it with LDS DMA
    kernel = tilegcn.jit(dynamic_gemm.matmul(T.dynamic("m"), 64, 64, 64, 64, 32, True, False, T.float16, T.float16,
                                             T.float32, 2, 128))
    for m in (96, 160):
        A, B, C = torch.randn(m, 64).half(), torch.randn(64, 64).half(), torch.zeros(m, 64).half()
        kernel(A.t().contiguous(), B, C, arch="gfx950")
        torch.testing.assert_close(C.float(), A.float() @ B.float(), rtol=1e-2, atol=1e-2)
    assert kernel.cache_stats.traces == 1
    ir = kernel.compile(A.t().contiguous(), B, C, arch="gfx950").ir
    assert "shape=(64, 16*m_div16) strides=(16*m_div16, 1)" in ir


KD = T.dynamic("KD")


@tilegcn.jit
def gemm_dynamic_k(A: T.Tensor(("M", KD)), B: T.Tensor((KD, "N")), C, *, bm=64, bn=64, bk=32):
    M, K = A.shape
    N = B.shape[1]
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
        A_s = T.alloc_shared((bm, bk), A.dtype)
        B_s = T.alloc_shared((bk, bn), B.dtype)
        acc = T.alloc_fragment((bm, bn), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
            T.copy(A[by * bm, k * bk], A_s)
            T.copy(B[k * bk, bx * bn], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * bm, bx * bn])


def test_a_dynamic_k_runs_the_k_loop_the_device_counts():
    """A dynamic K makes the K loop's trip count a device value: the loop is software pipelined all the same (its
    copies async into two stages, masked past the end), one compile serving K = 32 (one trip, fewer than the
    stages) and a ragged K = 80 (three)."""
    for k in (32, 80):
        a, b = torch.randn(64, k).half(), torch.randn(k, 64).half()
        c = torch.empty(64, 64, dtype=torch.float16)
        gemm_dynamic_k(a, b, c, arch="gfx950")
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    assert gemm_dynamic_k.cache_stats.compiles == 1
    assert "stage=1" in gemm_dynamic_k.compile(a, b, c, arch="gfx950").ir
