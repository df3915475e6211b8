"""The traced surface that decides what runs (issue 18, part "trace"): T.Pipelined's (start, stop) form runs the
trips TileLang runs, compile-time comparisons keep working where device ones are refused (tests/test_misuse.py),
and a kernel's Python name never reaches the assembler raw."""
import pytest
import torch

import tilegcn
from tilegcn import language as T


# -- T.Pipelined(start, stop, num_stages=...) -----------------------------------------------------------------
@tilegcn.jit
def copy_rows(X, Y, *, start=0, stop=1, num_stages=0):
    """Y[32k : 32k+32] = X[32k : 32k+32] * 2 for the trips k of T.Pipelined(start, stop) (num_stages=0: not given)."""
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((32, 64), "float32")
        loop = T.Pipelined(start, stop, num_stages=num_stages) if num_stages else T.Pipelined(start, stop)
        for k in loop:
            T.copy(X[k * 32, 0], x)
            for i, j in T.Parallel(32, 64):
                x[i, j] = x[i, j] * 2.0
            T.copy(x, Y[k * 32, 0])


@pytest.mark.parametrize("start, stop, num_stages", [(1, 3, 0), (2, 4, 2)])
def test_pipelined_start_stop_runs_trips_start_to_stop(start, stop, num_stages):
    x = torch.randn(128, 64)
    y = torch.zeros_like(x)
    copy_rows(x, y, start=start, stop=stop, num_stages=num_stages)
    want = torch.zeros_like(x)
    want[32 * start:32 * stop] = x[32 * start:32 * stop] * 2
    assert torch.equal(y, want)


@tilegcn.jit
def gemm_k_tiles(A, B, C, *, first=0, last=1, num_stages=1):
    """C = sum over K tiles first..last-1 of A[:, tile] @ B[tile, :] (32 x 32 x 32 tiles)."""
    with T.Kernel(1, threads=64):
        A_s = T.alloc_shared((32, 32), A.dtype)
        B_s = T.alloc_shared((32, 32), B.dtype)
        acc = T.alloc_fragment((32, 32), "float32")
        T.clear(acc)
        for k in T.Pipelined(first, last, num_stages=num_stages):
            T.copy(A[0, k * 32], A_s)
            T.copy(B[k * 32, 0], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[0, 0])


@pytest.mark.parametrize("num_stages", [2, 3])
def test_pipelined_gemm_sums_only_the_tiles_from_start(num_stages):
    """The software pipeliner (num_stages > 1) prefetches from the offset loop variable too."""
    torch.manual_seed(0)
    A = torch.randn(32, 128, dtype=torch.bfloat16)
    B = torch.randn(128, 32, dtype=torch.bfloat16)
    C = torch.empty(32, 32)
    gemm_k_tiles(A, B, C, first=1, last=3, num_stages=num_stages)
    want = A[:, 32:96].float() @ B[32:96].float()
    torch.testing.assert_close(C, want, rtol=1e-4, atol=1e-4)


# -- what stays decidable while tracing --------------------------------------------------------------------------
@tilegcn.jit
def scale_by_shape(X, Y, *, mode="double"):
    """Branches on a shape and a keyword constant (both Python values); keeps device values in a dict and a set."""
    M, N = X.shape
    with T.Kernel(M // 32, threads=64) as bx:
        starts = {bx: bx * 32}  # a device value as a dict key: hashed by identity, never compared
        assert bx in {bx} and bx in [bx]
        x = T.alloc_fragment((32, N), "float32")
        T.copy(X[starts[bx], 0], x)
        factor = 2.0 if (mode == "double" and N == 64 and 0 < M <= 128) else 3.0
        for i, j in T.Parallel(32, N):
            x[i, j] = T.max(x[i, j] * factor, 0.0)
        T.copy(x, Y[starts[bx], 0])


def test_compile_time_comparisons_and_device_values_as_keys_still_work():
    x = torch.randn(64, 64)
    y = torch.empty_like(x)
    scale_by_shape(x, y)
    assert torch.equal(y, torch.clamp(x * 2.0, min=0.0))
    scale_by_shape(x, y, mode="triple")
    assert torch.equal(y, torch.clamp(x * 3.0, min=0.0))


# -- kernel names the assembler cannot take raw --------------------------------------------------------------------
def ядро(X, Y):
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((32, 64), "float32")
        T.copy(X[0, 0], x)
        for i, j in T.Parallel(32, 64):
            x[i, j] = x[i, j] + 1.0
        T.copy(x, Y[0, 0])


def _renamed(name):
    def fn(X, Y):
        ядро(X, Y)
    fn.__name__ = name
    return tilegcn.jit(fn)


def _run_and_compile(kernel):
    x = torch.randn(32, 64)
    y = torch.empty_like(x)
    kernel(x, y)
    assert torch.equal(y, x + 1.0)
    compiled = kernel.compile(x, y)
    symbol = compiled.name
    assert symbol.isascii() and symbol.replace("_", "a").isalnum() and not symbol[0].isdigit(), symbol
    return compiled


def test_a_non_ascii_kernel_name_compiles_and_runs():
    compiled = _run_and_compile(tilegcn.jit(ядро))
    assert [line for line in compiled.asm.splitlines() if line.startswith(".globl")] == [f".globl {compiled.name}"]


@pytest.mark.parametrize("name", ["a;b\n c", "x:\n s_endpgm\n.globl evil"])
def test_a_name_with_assembly_syntax_injects_nothing(name):
    """The same program named plainly gives the same assembly but for the symbol: nothing of the name got in."""
    compiled = _run_and_compile(_renamed(name))
    plain = _run_and_compile(_renamed("plain_name"))
    assert plain.name == "plain_name"  # plain names stay as written (existing entries and asm look the same)
    assert compiled.asm.replace(compiled.name, "plain_name") == plain.asm
