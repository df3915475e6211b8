"""The standing adversarial suite: every way a user can misuse tilegcn ends in a tilegcn error.

Each case below does one wrong thing. The test asserts the tilegcn error class, that the message names
the cause (a regex), and, for program errors, that the error points at the user's line (this file).
Any other exception (TypeError, KeyError, ZeroDivisionError, ...) escaping to the user fails the test.
Most cases fail while tracing, before anything is compiled, so the table is cheap.
"""
import json
import math
import re

import numpy as np
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import (ArgumentError, CacheError, CompileError, DeviceError, ResourceError, TilegcnError,
                            UnsupportedArchError)
from tilegcn.runtime import hip_gpu_visible

CASES = []


def misuse(error, pattern, *, located=True):
    """Register a case: calling it must raise `error` whose message matches `pattern`; program errors
    (CompileError) and argument errors must also name a line of this file when `located`."""
    def register(fn):
        CASES.append(pytest.param(fn, error, pattern, located, id=fn.__name__))
        return fn
    return register


def xy(M=64, N=64, dtype=torch.float32):
    x = torch.randn(M, N, dtype=dtype)
    return x, torch.empty_like(x)


# -- generic tile programs: the misuse is passed in as a constant -------------------------------------------
@tilegcn.jit
def prog(X, Y, *, body=None):
    """Runs `body(X, Y)`: the whole tile program is the case's own function."""
    body(X, Y)


@tilegcn.jit
def ew(X, Y, *, f=None, block_M=64, block_N=64, threads=128):
    """Y = f(X) elementwise; `f` receives one tile element inside T.Parallel."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(X[by * block_M, bx * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = f(x[i, j])
        T.copy(x, Y[by * block_M, bx * block_N])


@tilegcn.jit
def ew_scalar(X, Y, s, *, f=None):
    """Y = f(X, s) with a runtime scalar `s`."""
    with T.Kernel(1, threads=128) as bx:
        x = T.alloc_fragment((64, 64), "float32")
        T.copy(X[0, 0], x)
        for i, j in T.Parallel(64, 64):
            x[i, j] = f(x[i, j], s)
        T.copy(x, Y[0, 0])


@tilegcn.jit
def gemm(A, B, C, *, block_M=64, block_N=64, block_K=32, threads=256, b_scope="shared", c_dtype="float32",
         transpose_B=False):
    M, K = A.shape
    N = C.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = (T.alloc_shared if b_scope == "shared" else T.alloc_fragment)(
            (block_N, block_K) if transpose_B else (block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), c_dtype)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K)):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[bx * block_N, k * block_K] if transpose_B else B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=transpose_B)
        T.copy(acc, C[by * block_M, bx * block_N])


def run_body(body, x=None, y=None):
    if x is None:
        x, y = xy()
    prog(x, y, body=body)


def run_ew(f, **kw):
    ew(*xy(), f=f, **kw)


def abc(M=64, N=64, K=64, dtype=torch.bfloat16):
    return torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype), torch.empty(M, N, dtype=dtype)


# == T.Kernel =================================================================================================
def kernel_with(*grid, threads=128):
    def body(X, Y):
        with T.Kernel(*grid, threads=threads):
            pass
    return body


@misuse(CompileError, r"grid .* empty dimension")
def kernel_grid_zero(): run_body(kernel_with(0))
@misuse(CompileError, r"grid .* empty dimension")
def kernel_grid_negative(): run_body(kernel_with(4, -1))
@misuse(CompileError, r"1 to 3 grid dimensions, got 4")
def kernel_four_dims(): run_body(kernel_with(1, 1, 1, 1))
@misuse(CompileError, r"1 to 3 grid dimensions, got 0")
def kernel_no_dims(): run_body(kernel_with())
@misuse(CompileError, r"threads must be an integer, got 64\.5 \(float\)")
def kernel_threads_fractional(): run_body(kernel_with(1, threads=64.5))
@misuse(CompileError, r"threads=100: must be a multiple of 64")
def kernel_threads_not_wave_multiple(): run_body(kernel_with(1, threads=100))
@misuse(CompileError, r"threads=2048: must be a multiple of 64 .*between 64 and 1024")
def kernel_threads_too_many(): run_body(kernel_with(1, threads=2048))
@misuse(CompileError, r"threads=0")
def kernel_threads_zero(): run_body(kernel_with(1, threads=0))
@misuse(CompileError, r"threads must be an integer, got '128' \(str\)")
def kernel_threads_str(): run_body(kernel_with(1, threads="128"))
@misuse(CompileError, r"grid size must be an integer, got 4\.5")
def kernel_grid_fractional(): run_body(kernel_with(4.5))
@misuse(CompileError, r"grid .*4294967296.*at most")
def kernel_grid_2_pow_32(): run_body(kernel_with(2 ** 32))
@misuse(CompileError, r"grid .*work-items")
def kernel_grid_workitems_past_32_bits(): run_body(kernel_with(2 ** 25, threads=256))
@misuse(CompileError, r"grid size must be known at compile time")
def kernel_grid_runtime_scalar(): _grid_scalar_kernel(xy()[0], 4)


@tilegcn.jit
def _grid_scalar_kernel(X, n):
    with T.Kernel(n, threads=64):
        pass



@misuse(CompileError, r"`with T.Kernel\(...\)` inside another T.Kernel block")
def kernel_nested():
    def body(X, Y):
        with T.Kernel(1):
            with T.Kernel(1):
                pass
    run_body(body)


@misuse(CompileError, r"never opened `with T.Kernel")
def kernel_never_opened(): run_body(lambda X, Y: None)
@misuse(CompileError, r"used outside a @tilegcn.jit kernel")
def language_outside_jit(): T.alloc_fragment((64, 64), "float32")
@misuse(CompileError, r"inside `with T.Kernel")
def statement_before_kernel():
    def body(X, Y):
        T.copy(X[0, 0], T.alloc_fragment((64, 64), "float32"))
    run_body(body)


# == allocations =============================================================================================
def alloc_with(shape, dtype="float32", alloc=None):
    def body(X, Y):
        with T.Kernel(1, threads=64):
            (alloc or T.alloc_fragment)(shape, dtype)
    return body


@misuse(CompileError, r"shape \(0, 64\) must be positive")
def alloc_zero(): run_body(alloc_with((0, 64)))
@misuse(CompileError, r"must be positive")
def alloc_negative(): run_body(alloc_with((64, -2)))
@misuse(CompileError, r"buffer shape \(64\.5, 64\): dimension 0 must be an integer, got 64\.5")
def alloc_fractional(): run_body(alloc_with((64.5, 64)))
@misuse(CompileError, r"buffer shape .*dimension 0 must be an integer, got '64' \(str\)")
def alloc_str_dim(): run_body(alloc_with(("64", 64)))
@misuse(CompileError, r"buffer shape .*dimension 0 must be known at compile time.*depends on bx")
def alloc_block_id_dependent():
    def body(X, Y):
        with T.Kernel(2, threads=64) as bx:
            T.alloc_fragment((64 * (bx + 1), 64), "float32")
    run_body(body)


@misuse(CompileError, r"buffer shape.*known at compile time")
def alloc_runtime_scalar_dependent(): _alloc_scalar(xy()[0], 8)


@tilegcn.jit
def _alloc_scalar(X, n):
    with T.Kernel(1, threads=64):
        T.alloc_fragment((n, 64), "float32")


@misuse(CompileError, r"unsupported dtype 'float64'")
def alloc_dtype_float64(): run_body(alloc_with((64, 64), "float64"))
@misuse(CompileError, r"unsupported dtype torch.complex64")
def alloc_dtype_torch_complex64(): run_body(alloc_with((64, 64), torch.complex64))
@misuse(CompileError, r"unsupported dtype None")
def alloc_dtype_none(): run_body(alloc_with((64, 64), None))
@misuse(CompileError, r"buffer shape .*dimension 0 must be an integer, got \[64\] \(list\)")
def alloc_nested_shape(): run_body(alloc_with(([64], 64)))
@misuse(CompileError, r"buffer shape None: dimension 0 must be an integer, got None")
def alloc_shape_none(): run_body(alloc_with(None))
@misuse(CompileError, r"unsupported dtype 'uint32'")
def alloc_shared_dtype(): run_body(alloc_with((64, 64), "uint32", T.alloc_shared))
@misuse(ResourceError, r"(?i)vgpr|register")
def fragment_past_register_file():
    ew(*xy(128, 256), f=lambda v: v, block_M=128, block_N=256, threads=64)


# == T.copy ==================================================================================================
def copy_body(make):
    def body(X, Y):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            s = T.alloc_shared((64, 64), "bfloat16")
            make(X, Y, x, s)
    return body


@misuse(CompileError, r"global to global")
def copy_global_to_global(): run_body(copy_body(lambda X, Y, x, s: T.copy(X[0, 0:64], Y[0, 0:64])))
@misuse(CompileError, r"T.copy extents differ: \(64, 64\) vs \(32, 64\)")
def copy_whole_global_into_smaller_tile():
    run_body(copy_body(lambda X, Y, x, s: T.copy(X, T.alloc_fragment((32, 64), "float32"))))
@misuse(CompileError, r"T.copy extents differ")
def copy_fragment_extents_differ():
    run_body(copy_body(lambda X, Y, x, s: T.copy(x, T.alloc_fragment((32, 64), "float32"))))
@misuse(CompileError, r"3-d tile does not fit X, which has 2 dims")
def copy_tile_more_dims_than_tensor():
    run_body(copy_body(lambda X, Y, x, s: T.copy(X[0, 0], T.alloc_fragment((2, 32, 64), "float32"))))
@misuse(CompileError, r"slices with a step")
def copy_slice_step(): run_body(copy_body(lambda X, Y, x, s: T.copy(X[0:64:2, 0], x)))
@misuse(CompileError, r"T.copy from shared \w+ into a, a T.gemm operand: .*copy the global tile into a directly")
def copy_shared_into_gemm_operand():
    def body(X, Y):
        with T.Kernel(1, threads=256):
            s = T.alloc_shared((64, 32), "bfloat16")
            a = T.alloc_shared((64, 32), "bfloat16")
            b = T.alloc_shared((32, 64), "bfloat16")
            T.copy(s, a)
            T.gemm(a, b, T.alloc_fragment((64, 64), "float32"))
    run_body(body)
@misuse(CompileError, r"expected a tensor region, shared buffer or fragment, got 3")
def copy_from_int(): run_body(copy_body(lambda X, Y, x, s: T.copy(3, x)))
@misuse(CompileError, r"a bool is not an index")
def copy_bool_index(): run_body(copy_body(lambda X, Y, x, s: T.copy(X[True, 0], x)))
@misuse(CompileError, r"expected an integer index expression, got 0\.5")
def copy_float_index(): run_body(copy_body(lambda X, Y, x, s: T.copy(X[0.5, 0], x)))
@misuse(CompileError, r"3 indices for a 2-d buffer")
def copy_too_many_indices(): run_body(copy_body(lambda X, Y, x, s: T.copy(X[0, 0, 0], x)))
@misuse(CompileError, r"slice extent 32 on dim 0 does not match the tile's 64")
def copy_slice_extent_mismatch(): run_body(copy_body(lambda X, Y, x, s: T.copy(X[0:32, 0:64], x)))
@misuse(CompileError, r"expected a tensor region, shared buffer or fragment, got 'Y'")
def copy_to_string(): run_body(copy_body(lambda X, Y, x, s: T.copy(x, "Y")))


@misuse(CompileError, r"outside its shape")
def copy_fragment_region_out_of_bounds():
    run_body(copy_body(lambda X, Y, x, s: T.copy(x[32:96, 0:64], T.alloc_fragment((64, 64), "float32"))))
@misuse(CompileError, r"x\w*: T.copy takes a whole fragment .*copy it whole into a shared buffer of its shape")
def copy_fragment_region_to_global():
    run_body(copy_body(lambda X, Y, x, s: T.copy(x[0:32, 0:64], Y[0:32, 0:64])))


@misuse(CompileError, r"indexing X: expected an integer index expression")
def copy_float_scalar_index(): _copy_at(*xy(), 1.5)


@tilegcn.jit
def _copy_at(X, Y, s):
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((64, 64), "float32")
        T.copy(X[s, 0], x)


# == T.gemm ==================================================================================================
@misuse(CompileError, r"A must be a shared buffer or a fragment and B a shared buffer")
def gemm_b_in_fragment(): gemm(*abc(), b_scope="fragment")
@misuse(CompileError, r"C must be a float32 fragment")
def gemm_bf16_accumulator(): gemm(*abc(), c_dtype="bfloat16")
@misuse(CompileError, r"must have one dtype of bfloat16, float16, .*int8 \(got float32, float32\)")
def gemm_fp32_operands(): gemm(*abc(dtype=torch.float32))
@misuse(CompileError, r"must have one dtype of bfloat16, float16, .*int8 \(got bfloat16, float16\)")
def gemm_mixed_dtypes():
    a, b, c = abc()
    gemm(a, b.half(), c)
@misuse(CompileError, r"T.gemm shapes do not agree")
def gemm_k_mismatch():
    def body(A, B):
        with T.Kernel(1, threads=256):
            a = T.alloc_shared((64, 32), "bfloat16")
            b = T.alloc_shared((64, 64), "bfloat16")
            c = T.alloc_fragment((64, 64), "float32")
            T.gemm(a, b, c)
    run_body(body)


@misuse(CompileError, r"T.gemm shapes do not agree")
def gemm_c_shape_mismatch():
    def body(A, B):
        with T.Kernel(1, threads=256):
            a = T.alloc_shared((64, 32), "bfloat16")
            b = T.alloc_shared((32, 64), "bfloat16")
            T.gemm(a, b, T.alloc_fragment((64, 32), "float32"))
    run_body(body)


@misuse(CompileError, r"T.gemm operands must be 2-d")
def gemm_3d_operand():
    def body(A, B):
        with T.Kernel(1, threads=256):
            a = T.alloc_shared((1, 64, 32), "bfloat16")
            b = T.alloc_shared((32, 64), "bfloat16")
            T.gemm(a, b, T.alloc_fragment((64, 64), "float32"))
    run_body(body)


@misuse(CompileError, r"T.gemm A: expected a buffer from T.alloc_shared/T.alloc_fragment")
def gemm_global_operand():
    def body(A, B):
        with T.Kernel(1, threads=256):
            T.gemm(A[0, 0], T.alloc_shared((64, 64), "bfloat16"), T.alloc_fragment((64, 64), "float32"))
    run_body(body)


@misuse(CompileError, r"gemm is not allowed inside T.Parallel")
def gemm_inside_parallel():
    def body(A, B):
        with T.Kernel(1, threads=256):
            a = T.alloc_shared((64, 64), "bfloat16")
            c = T.alloc_fragment((64, 64), "float32")
            for i, j in T.Parallel(64, 64):
                T.gemm(a, a, c)
    run_body(body)


@misuse(CompileError, r"(?i)mfma|multiple")
def gemm_tile_not_mfma_multiple(): gemm(*abc(), block_M=8, block_N=8, block_K=8, threads=64)
@misuse(ResourceError, r"(?i)LDS.*(needs|need).*\d+")
def gemm_lds_over_budget(): gemm(*abc(512, 512, 512), block_M=512, block_N=512, block_K=128, threads=1024)
@misuse(CompileError, r"16-byte aligned")
def gemm_misaligned_operand_view():
    a, b, c = abc(64, 64, 66)
    gemm(a[:, 2:], b[2:], c)
@misuse(CompileError, r"A: its row stride of 67 bfloat16 elements is odd \(a view into a wider tensor\)")
def gemm_odd_row_stride_view():
    a, b, c = abc(64, 64, 67)
    gemm(a[:, :64], b[:64], c)
@misuse(CompileError, r"NameError while tracing the tile program: name 'undefined_name' is not defined")
def user_name_error():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            undefined_name  # noqa: F821, B018
    run_body(body)
@misuse(CompileError, r"A: rows of 63 bfloat16 elements are not 4-byte aligned: T.gemm needs an even row length")
def gemm_odd_row_length(): gemm(*abc(64, 64, 63))
@misuse(CompileError, r"T.gemm C: expected a buffer")
def gemm_c_is_int():
    def body(A, B):
        with T.Kernel(1, threads=256):
            a = T.alloc_shared((64, 64), "bfloat16")
            T.gemm(a, a, 0)
    run_body(body)


# == T.Parallel and element expressions =========================================================================
@misuse(CompileError, r"T.Parallel cannot be nested")
def parallel_nested():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            T.alloc_fragment((64, 64), "float32")
            for i in T.Parallel(64):
                for j in T.Parallel(64):
                    pass
    run_body(body)


@misuse(CompileError, r"T.Parallel extent must be an integer, got 6\.5")
def parallel_fractional_extent():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(6.5):
                pass
    run_body(body)


@misuse(CompileError, r"T.Parallel extent must be known at compile time")
def parallel_block_id_extent():
    def body(X, Y):
        with T.Kernel(2, threads=64) as bx:
            for i in T.Parallel(bx + 1):
                pass
    run_body(body)


def parallel_store(target):
    def body(X, Y):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 64), "float32")
            s = T.alloc_shared((64, 64), "float32")
            T.copy(X[0, 0], x)
            for i, j in T.Parallel(64, 64):
                target(X, x, s, i, j)
    return body


def _set(buf, idx, value):
    buf[idx] = value


@misuse(CompileError, r"assign s\[pi, pj\] with the T.Parallel indices in order")
def parallel_assign_shared_transposed(): run_body(parallel_store(lambda X, x, s, i, j: _set(s, (j, i), x[i, j])))
@misuse(CompileError, r"X\[i, 0\] in T.Parallel\(64, 64\): T.Parallel index j is not used")
def parallel_assign_global_dropping_an_index(): run_body(parallel_store(lambda X, x, s, i, j: _set(X, (i, 0), x[i, j])))
@misuse(CompileError, r"X\[i \+ j, 0\] in T.Parallel\(64, 64\): each index of a global store must be a start plus one")
def parallel_assign_global_at_a_sum(): run_body(parallel_store(lambda X, x, s, i, j: _set(X, (i + j, 0), x[i, j])))
@misuse(CompileError, r"with the T.Parallel indices in order")
def parallel_assign_transposed(): run_body(parallel_store(lambda X, x, s, i, j: _set(x, (j, i), 1.0)))
@misuse(CompileError, r"x has 2 dims, indexed with 1")
def parallel_wrong_index_count(): run_body(parallel_store(lambda X, x, s, i, j: _set(x, (i, j), x[i])))
@misuse(CompileError, r"shared s\[64, 64\] read at \[i \+ 1, j\] in T.Parallel.*outside its size 64")
def parallel_read_shared_past_its_end(): run_body(parallel_store(lambda X, x, s, i, j: _set(x, (i, j), s[i + 1, j])))
@misuse(CompileError, r"T.copy is not allowed inside T.Parallel")
def parallel_contains_copy(): run_body(parallel_store(lambda X, x, s, i, j: T.copy(X[0, 0], x)))
@misuse(CompileError, r"T.Parallel\(32, 64\) does not match the shape \(64, 64\)")
def parallel_extent_mismatch():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64, 64), "float32")
            for i, j in T.Parallel(32, 64):
                x[i, j] = 0.0
    run_body(body)


@misuse(CompileError, r"element assignment to x outside T.Parallel")
def assign_outside_parallel():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64, 64), "float32")
            x[0, 0] = 1.0
    run_body(body)


@misuse(CompileError, r"`\*\*`.*T.exp2")
def op_pow(): run_ew(lambda v: v ** 2)
@misuse(CompileError, r"`\*\*`")
def op_rpow(): run_ew(lambda v: 2 ** v)
@misuse(CompileError, r"`%` takes integer operands.*got the float.*T.cast\(")
def op_mod(): run_ew(lambda v: v % 2)
@misuse(CompileError, r"`%` takes integer operands")
def op_rmod(): run_ew(lambda v: 2 % v)
@misuse(CompileError, r"`//` takes integer operands")
def op_floordiv(): run_ew(lambda v: v // 2)
@misuse(CompileError, r"abs\(\).*T.abs")
def op_builtin_abs(): run_ew(lambda v: abs(v))
@misuse(CompileError, r"math.exp|float\(\).*T.exp")
def op_math_exp(): run_ew(lambda v: math.exp(v))
@misuse(CompileError, r"math.sqrt|float\(\)")
def op_math_sqrt(): run_ew(lambda v: math.sqrt(v))
@misuse(CompileError, r"torch.sigmoid.*T.exp")
def op_torch_sigmoid(): run_ew(lambda v: torch.sigmoid(v))
@misuse(CompileError, r"torch.exp.*T.exp")
def op_torch_exp(): run_ew(lambda v: torch.exp(v))
@misuse(CompileError, r"numpy.*T\.")
def op_numpy_exp(): run_ew(lambda v: np.exp(v))
@misuse(CompileError, r"truth test \(if/and/or/not\) on an element expression \(x\[pi, pj\] > 0\).*no trace-time "
                      r"truth value.*T\.if_then_else\(cond, a, b\)")
def op_if_greater():
    def f(v):
        if v > 0:
            return v
        return 0.0
    run_ew(f)


@misuse(CompileError, r"x\[\.\.\.\] = x\[pi, pj\] < 1\.0: a comparison is a condition, not an element value.*"
                      r"T\.if_then_else\(cond, 1\.0, 0\.0\)")
def op_less(): run_ew(lambda v: v < 1.0)
@misuse(CompileError, r"x\[pi, pj\] >= 1\.0: a comparison is a condition")
def op_greater_equal(): run_ew(lambda v: v >= 1.0)
@misuse(CompileError, r"x\[pi, pj\] <= 1\.0: a comparison is a condition")
def op_less_equal_reflected(): run_ew(lambda v: 1.0 >= v)
@misuse(CompileError, r"the comparison x\[pi, pj\] > 0\.0 is a condition, not a value, and cannot be an operand of "
                      r"mul.*T\.if_then_else")
def op_comparison_as_value(): run_ew(lambda v: (v > 0.0) * 2.0)
@misuse(CompileError, r"`&` combines comparisons \(conditions\), got the value x\[pi, pj\]: compare it first")
def op_condition_and_value(): run_ew(lambda v: T.if_then_else((v > 0.0) & v, v, 0.0))
@misuse(CompileError, r"truth test \(if/and/or/not\) on an element expression \(\(x\[pi, pj\] > 0\.0\) & "
                      r"\(x\[pi, pj\] < 1\.0\)\)")
def op_if_on_combined_condition(): run_ew(lambda v: v if (v > 0.0) & (v < 1.0) else 0.0)
@misuse(CompileError, r"cannot be an operand of exp")
def op_comparison_in_math(): run_ew(lambda v: T.exp(v > 0.0))
@misuse(CompileError, r"T\.if_then_else takes a comparison as its condition.*got the value x\[pi, pj\]; compare it")
def op_if_then_else_value_condition(): run_ew(lambda v: T.if_then_else(v, 1.0, 0.0))
@misuse(CompileError, r"cannot use 'a' \(str\) in an element expression")
def op_if_then_else_str(): run_ew(lambda v: T.if_then_else(v > 0.0, "a", 0.0))
@misuse(CompileError, r"T\.float32\('1'\): expected a number or an element expression, got str")
def op_dtype_call_str(): run_ew(lambda v: v * T.float32("1"))
@misuse(CompileError, r"unsupported dtype 'int4'")
def op_infinity_bad_dtype(): run_ew(lambda v: T.max(v, -T.infinity("int4")))
@misuse(CompileError, r"comparison `>` on the runtime scalar s would be decided once")
def op_scalar_compared_in_python_if(): ew_scalar(*xy(), 2.0, f=lambda v, s: v if s > 0.0 else 0.0)
@misuse(CompileError, r"the T.Parallel index j is not an integer \(index arithmetic with a float: 0\.5\*pj\).*"
                      r"T\.cast\(i, \"float32\"\) \* 0\.5")
def op_float_index_arithmetic_as_value():
    run_body(parallel_store(lambda X, x, s, i, j: _set(x, (i, j), x[i, j] + j * 0.5)))
@misuse(CompileError, r"int\(\)")
def op_int(): run_ew(lambda v: int(v))
@misuse(CompileError, r"float\(\)")
def op_float(): run_ew(lambda v: float(v))
@misuse(CompileError, r"round\(\)")
def op_round(): run_ew(lambda v: round(v))
@misuse(CompileError, r"cannot use 'a' \(str\) in an element expression")
def op_str_value(): run_ew(lambda v: "a")
@misuse(CompileError, r"cannot use None")
def op_none_value(): run_ew(lambda v: None)
@misuse(CompileError, r"cannot use 1j \(complex\)")
def op_complex_value(): run_ew(lambda v: v + 1j)
@misuse(CompileError, r"`&`")
def op_bitand(): run_ew(lambda v: v & 1)
@misuse(CompileError, r"`\|`")
def op_bitor(): run_ew(lambda v: v | 1)
@misuse(CompileError, r"`<<`")
def op_shift(): run_ew(lambda v: v << 1)
@misuse(CompileError, r"`@`")
def op_matmul(): run_ew(lambda v: v @ v)
@misuse(CompileError, r"`~`")
def op_invert(): run_ew(lambda v: ~v)
@misuse(CompileError, r"cannot use 'x' \(str\)")
def op_t_max_str(): run_ew(lambda v: T.max(v, "x"))
@misuse(CompileError, r"cannot use \[1\.0\] \(list\)")
def op_t_exp_list(): run_ew(lambda v: T.exp([1.0]))
@misuse(CompileError, r"unsupported dtype 'int4'")
def op_cast_int4(): run_ew(lambda v: T.cast(v, "int4"))
@misuse(CompileError, r"cannot use True \(bool\)")
def op_bool_value(): run_ew(lambda v: v * True)
@misuse(CompileError, r"a truth test \(if/and/or/not\) on an element expression")
def op_truth_value(): run_ew(lambda v: v if v else 0.0)
@misuse(CompileError, r"`\*\*`")
def op_scalar_pow(): ew_scalar(*xy(), 2.0, f=lambda v, s: v * s ** 2)
@misuse(CompileError, r"`%`")
def op_scalar_mod(): ew_scalar(*xy(), 3.0, f=lambda v, s: v + s % 2)
@misuse(CompileError, r"whole fragment tile x: element math goes inside .*T.Parallel")
def whole_tile_arithmetic():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64, 64), "float32")
            x + 1.0
    run_body(body)


@misuse(CompileError, r"whole fragment tile x: element math goes inside .*T.Parallel")
def whole_tile_augmented_assign():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64, 64), "float32")
            x *= 2.0
    run_body(body)


@misuse(CompileError, r"iterating over global X: loop over its elements with `for i, j in T.Parallel")
def iterate_over_tensor():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            for row in X:
                pass
    run_body(body)


@misuse(CompileError, r"expected an integer index expression, got 0\.5")
def parallel_float_index_into_global():
    run_body(parallel_store(lambda X, x, s, i, j: _set(x, (i, j), X[i, 0.5])))


# == T.Pipelined ================================================================================================
def pipelined(n, **kw):
    def body(X, Y):
        with T.Kernel(1, threads=64):
            for k in T.Pipelined(n, **kw):
                pass
    return body


@misuse(CompileError, r"trip count must be positive, got 0")
def pipelined_zero_trips(): run_body(pipelined(0))
@misuse(CompileError, r"trip count must be an integer, got 2\.5")
def pipelined_fractional_trips(): run_body(pipelined(2.5))
@misuse(CompileError, r"num_stages must be >= 0, got -1")
def pipelined_negative_stages(): run_body(pipelined(4, num_stages=-1))
@misuse(CompileError, r"num_stages must be an integer, got '2' \(str\)")
def pipelined_str_stages(): run_body(pipelined(4, num_stages="2"))
@misuse(CompileError, r"T.Pipelined trip count must be an integer, got n \(runtime float32 scalar\)")
def pipelined_runtime_trips(): _loop_scalar(xy()[0], 4.0)  # an int one is a device bound (test_control_flow.py)


@tilegcn.jit
def _loop_scalar(X, n):
    with T.Kernel(1, threads=64):
        for k in T.Pipelined(n):
            pass


# == T.fill / T.clear ============================================================================================
def fill_body(make):
    def body(X, Y):
        with T.Kernel(1, threads=64):
            make(X, T.alloc_fragment((64, 64), "float32"), T.alloc_shared((64, 64), "float32"))
    return body


@misuse(CompileError, r"T.fill value must be a number, got 'abc' \(str\)")
def fill_str(): run_body(fill_body(lambda X, x, s: T.fill(x, "abc")))
@misuse(CompileError, r"T.fill value must be a number, got None")
def fill_none(): run_body(fill_body(lambda X, x, s: T.fill(x, None)))
@misuse(CompileError, r"T.fill value must be a number, got 1j")
def fill_complex(): run_body(fill_body(lambda X, x, s: T.fill(x, 1j)))
@misuse(CompileError, r"T.fill takes a fragment or shared buffer, not a global tensor")
def fill_global(): run_body(fill_body(lambda X, x, s: T.fill(X, 0.0)))
@misuse(CompileError, r"T.fill of shared buffer a, a T.gemm operand: its tile is stored XOR-swizzled")
def fill_gemm_operand():
    def body(X, Y):
        with T.Kernel(1, threads=256):
            a = T.alloc_shared((64, 32), "bfloat16")
            b = T.alloc_shared((32, 64), "bfloat16")
            T.clear(a)
            T.gemm(a, b, T.alloc_fragment((64, 64), "float32"))
    run_body(body)
@misuse(CompileError, r"T.fill: expected a buffer from T.alloc_shared/T.alloc_fragment, got 3")
def clear_int(): run_body(fill_body(lambda X, x, s: T.clear(3)))
@misuse(CompileError, r"T.fill value must be a number known at compile time; v is a runtime scalar")
def fill_runtime_scalar(): _fill_scalar(xy()[0], 2.0)


@tilegcn.jit
def _fill_scalar(X, v):
    with T.Kernel(1, threads=64):
        T.fill(T.alloc_fragment((64, 64), "float32"), v)


# == T.use_swizzle ===============================================================================================
def swizzle(*args, inside_loop=False, twice=False, **kw):
    def body(X, Y):
        with T.Kernel(4, 4, threads=64):
            if inside_loop:
                for k in T.Pipelined(2):
                    T.use_swizzle(*args, **kw)
            else:
                T.use_swizzle(*args, **kw)
                if twice:
                    T.use_swizzle(*args, **kw)
    return body


@misuse(CompileError, r"panel_size and num_xcds must be positive")
def swizzle_zero_panel(): run_body(swizzle(0))
@misuse(CompileError, r"panel_size and num_xcds must be positive")
def swizzle_negative_xcds(): run_body(swizzle(4, num_xcds=-8))
@misuse(CompileError, r"must be at the top of the kernel body")
def swizzle_inside_loop(): run_body(swizzle(4, inside_loop=True))
@misuse(CompileError, r"T.use_swizzle given twice")
def swizzle_twice(): run_body(swizzle(4, twice=True))
@misuse(CompileError, r"panel_size must be an integer, got '8' \(str\)")
def swizzle_str_panel(): run_body(swizzle("8"))
@misuse(CompileError, r"num_xcds must be an integer, got 8\.5")
def swizzle_fractional_xcds(): run_body(swizzle(4, num_xcds=8.5))


# == T.ceildiv ===================================================================================================
@misuse(CompileError, r"T.ceildiv\(64, 0\): division by zero")
def ceildiv_zero(): run_ew(lambda v: v, block_M=0)
@misuse(ArgumentError, r"constant block_M='64' is a str; the default is int 64")
def ceildiv_str_constant(): run_ew(lambda v: v, block_M="64")
@misuse(CompileError, r"T.ceildiv divisor must be an integer, got 2\.5")
def ceildiv_fractional():
    def body(X, Y):
        with T.Kernel(T.ceildiv(64, 2.5), threads=64):
            pass
    run_body(body)


@misuse(CompileError, r"T.ceildiv divisor must be an integer, got '64' \(str\)")
def ceildiv_str():
    def body(X, Y):
        with T.Kernel(T.ceildiv(X.shape[0], "64"), threads=64):
            pass
    run_body(body)


@misuse(CompileError, r"T.ceildiv\(64, -64\).*positive")
def ceildiv_negative():
    def body(X, Y):
        with T.Kernel(T.ceildiv(64, -64), threads=64):
            pass
    run_body(body)


@misuse(CompileError, r"ZeroDivisionError while tracing the tile program: integer division or modulo by zero")
def user_integer_division_by_zero():
    def body(X, Y):
        with T.Kernel(X.shape[0] // 0, threads=64):
            pass
    run_body(body)


# == T.Tensor annotations ========================================================================================
@tilegcn.jit
def annotated(X: T.Tensor(("M", "N"), "bfloat16"), Y: T.Tensor(("M", 64), "bfloat16")):
    with T.Kernel(1, threads=64):
        pass


@misuse(ArgumentError, r"argument X has dtype float32, the kernel declares bfloat16")
def annotation_dtype(): annotated(*xy())
@misuse(ArgumentError, r"argument X has 1 dims")
def annotation_ndim(): annotated(torch.zeros(64, dtype=torch.bfloat16), torch.zeros(64, 64, dtype=torch.bfloat16))
@misuse(ArgumentError, r"dimension 1 must be 64")
def annotation_fixed_dim(): annotated(*xy(64, 32, torch.bfloat16))
@misuse(ArgumentError, r"mismatched shapes: Y.shape\[0\] = 32 but M = 64")
def annotation_named_size():
    annotated(torch.zeros(64, 64, dtype=torch.bfloat16), torch.zeros(32, 64, dtype=torch.bfloat16))
@misuse(ArgumentError, r"unsupported dtype 'float64'")
def annotation_bad_dtype():
    @tilegcn.jit
    def k(X: T.Tensor((64,), "float64")):
        pass


# == arguments ===================================================================================================
@misuse(ArgumentError, r"tensor X has dtype torch.uint32")
def arg_uint32(): ew(torch.zeros(64, 64, dtype=torch.uint32), xy()[1], f=None)
@misuse(ArgumentError, r"tensor X has dtype torch.bool")
def arg_bool_tensor(): ew(torch.zeros(64, 64, dtype=torch.bool), xy()[1], f=None)
@misuse(ArgumentError, r"tensor X has dtype torch.complex64")
def arg_complex_tensor(): ew(torch.zeros(64, 64, dtype=torch.complex64), xy()[1], f=None)
@misuse(ArgumentError, r"tensor Y has dtype torch.float64")
def arg_float64(): ew(xy()[0], torch.zeros(64, 64, dtype=torch.float64), f=None)
@misuse(ArgumentError, r"tensor X is a meta tensor")
def arg_meta(): ew(torch.empty(64, 64, device="meta"), torch.empty(64, 64, device="meta"), f=lambda v: v)
@misuse(ArgumentError, r"different devices|meta tensor")
def arg_mixed_meta(): ew(xy()[0], torch.empty(64, 64, device="meta"), f=lambda v: v)
@misuse(ArgumentError, r"last dimension must have stride 1")
def arg_column_stride(): ew(torch.randn(64, 128)[:, ::2], xy()[1], f=lambda v: v)
@misuse(ArgumentError, r"Y .*written.*stride 0.*broadcast")
def arg_broadcast_output(): ew(xy()[0], torch.empty(1, 64).expand(64, 64), f=lambda v: v)
@misuse(ArgumentError, r"Y is written.*elements may overlap")
def arg_overlapping_output_rows():
    base = torch.empty(64 * 32 + 32)
    ew(xy()[0], base.as_strided((64, 64), (32, 1)), f=lambda v: v)
@misuse(ArgumentError, r"takes 2 positional argument\(s\) \(X, Y\), got 1")
def arg_too_few(): ew(xy()[0], f=None)
@misuse(ArgumentError, r"takes 2 positional argument\(s\) \(X, Y\), got 3")
def arg_too_many(): ew(*xy(), xy()[0], f=None)
@misuse(ArgumentError, r"argument Y of ew\(\) must be a torch tensor or an int/float scalar, got str")
def arg_str(): ew(xy()[0], "y", f=None)
@misuse(ArgumentError, r"got NoneType")
def arg_none(): ew(xy()[0], None, f=None)
@misuse(ArgumentError, r"got list")
def arg_list(): ew(xy()[0], [1.0], f=None)
@misuse(ArgumentError, r"got ndarray.*torch.from_numpy")
def arg_numpy(): ew(xy()[0], np.zeros((64, 64), np.float32), f=None)
@misuse(ArgumentError, r"argument s .*got complex")
def arg_complex_scalar(): ew_scalar(*xy(), 1j, f=lambda v, s: v)
@misuse(ArgumentError, r"unknown keyword argument 'blockM'")
def arg_unknown_keyword(): ew(*xy(), f=None, blockM=64)
@misuse(ArgumentError, r"'X' \(it is positional: pass it by position\)")
def arg_positional_as_keyword(): ew(*xy(), f=None, X=xy()[0])
@misuse(ArgumentError, r"missing keyword argument\(s\): needed")
def arg_missing_constant(): _needs_constant(*xy())


@tilegcn.jit
def _needs_constant(X, Y, *, needed):
    with T.Kernel(1, threads=64):
        pass


@misuse(ArgumentError, r"constant threads=None is a NoneType; the default is int 128")
def arg_none_constant(): run_ew(lambda v: v, threads=None)
@misuse(ArgumentError, r"constant block_N=\[64\] is a list")
def arg_list_constant(): run_ew(lambda v: v, block_N=[64])
@misuse(ArgumentError, r"sparse")
def arg_sparse(): ew(xy()[0].to_sparse(), xy()[1], f=lambda v: v)


# == the decorator, arch, device and environment =================================================================
@misuse(ArgumentError, r"\*args/\*\*kwargs are not supported")
def jit_varargs():
    @tilegcn.jit
    def k(*xs):
        pass


@misuse(ArgumentError, r"\*args/\*\*kwargs are not supported")
def jit_varkw():
    @tilegcn.jit
    def k(X, **kw):
        pass


@misuse(CompileError, r"buffer shape \(block \(runtime int32 scalar\),\).*block is a runtime scalar.*give it a "
                      r"default \(`block=64`\) or make it keyword-only")
def jit_runtime_scalar_as_size():
    @tilegcn.jit
    def k(X, block):
        with T.Kernel(1, threads=64):
            T.alloc_fragment((block,), "float32")

    k(torch.zeros(64), 64)


@misuse(ArgumentError, r"'arch' is reserved")
def jit_arch_keyword():
    @tilegcn.jit
    def k(X, *, arch="gfx942"):
        pass


@misuse(UnsupportedArchError, r"gfx90a.*gfx942, gfx950", located=False)
def jit_decorator_arch(): tilegcn.jit(arch="gfx90a")(lambda X: None)
@misuse(UnsupportedArchError, r"sm_90.*gfx942", located=False)
def call_arch_cuda_name(): run_ew(lambda v: v, arch="sm_90")
@misuse(UnsupportedArchError, r"942.*gfx942", located=False)
def call_arch_int(): run_ew(lambda v: v, arch=942)
@misuse(ArgumentError, r"tilegcn.jit.*function")
def jit_non_function(): tilegcn.jit(42)


@pytest.fixture
def env(monkeypatch):
    return monkeypatch


ENV_CASES = [
    pytest.param({"TILEGCN_ARCH": "gfx1100"}, UnsupportedArchError, r"gfx1100.*TILEGCN_ARCH", id="env_arch"),
    pytest.param({"TILEGCN_DEVICE": "gpu"}, DeviceError, r"unknown device 'gpu'.*emulator, hip, auto",
                 id="env_device"),
    pytest.param({"TILEGCN_DEVICE": "hip"}, DeviceError, r"HIP device .*needs the HIP runtime and an AMD GPU",
                 id="env_device_hip_without_gpu", marks=pytest.mark.skipif(hip_gpu_visible(), reason="a GPU is here")),
    pytest.param({"TILEGCN_CACHE_DIR": __file__}, CacheError, r"cannot create the cache dir", id="env_cache_is_file"),
]


# == the emulated device =========================================================================================
def _emulator_module(x, y):
    from tilegcn.runtime import get_device

    k = ew.compile(x, y, f=lambda v: v + 1.0)
    return k, get_device("emulator").load(k.hsaco)


@misuse(ArgumentError, r"was compiled for .*called with", located=False)
def compiled_kernel_other_shape():
    k, _ = _emulator_module(*xy())
    k(*xy(128, 64))


@misuse(DeviceError, r"no kernel 'nope' in the code object", located=False)
def emulator_unknown_kernel():
    k, module = _emulator_module(*xy())
    module.launch("nope", (1, 1, 1), (128, 1, 1), xy())


@misuse(DeviceError, r"grid must be 1 to 3 positive integers", located=False)
def emulator_zero_grid():
    k, module = _emulator_module(*xy())
    module.launch(k.name, (0, 1, 1), (128, 1, 1), xy())


@misuse(ArgumentError, r"kernel takes 2 arguments, got 1", located=False)
def emulator_wrong_argument_count():
    k, module = _emulator_module(*xy())
    module.launch(k.name, (1, 1, 1), (128, 1, 1), xy()[:1])


@misuse(DeviceError, r"(?i)not an ELF|code object", located=False)
def emulator_garbage_code_object():
    from tilegcn.runtime import get_device

    get_device("emulator").load(b"\x7fELF not really")


@misuse(DeviceError, r"unknown device 'tpu'", located=False)
def get_device_unknown():
    from tilegcn.runtime import get_device

    get_device("tpu")


def abs_free_identity(v):
    return v


def _entry(k):
    from pathlib import Path

    return Path(k.cache_path)


# == the tests ===================================================================================================
def _check(fn, error, pattern, located):
    try:
        fn()
    except TilegcnError as e:
        assert isinstance(e, error), f"expected {error.__name__}, got {type(e).__name__}: {e}"
        assert re.search(pattern, str(e)), f"message does not name the cause ({pattern!r}): {e}"
        if located and isinstance(e, (CompileError, ArgumentError)):
            assert __file__ in str(e), f"the error does not point at the user's line: {e}"
        return
    except Exception as e:  # noqa: BLE001 - the point of the suite
        pytest.fail(f"a raw {type(e).__name__} escaped instead of a tilegcn error: {e}")
    pytest.fail("no error raised")


@pytest.mark.parametrize("fn, error, pattern, located", CASES)
def test_misuse(fn, error, pattern, located):
    _check(fn, error, pattern, located)


@pytest.mark.parametrize("settings, error, pattern", ENV_CASES)
def test_environment_misuse(settings, error, pattern, monkeypatch):
    for k, v in settings.items():
        monkeypatch.setenv(k, v)
    _check(lambda: run_ew(lambda v: v), error, pattern, located=False)


def test_the_table_is_large():
    assert len(CASES) + len(ENV_CASES) >= 100


# == constants the device computes in IEEE fp32: folded the same way, never a Python exception =================
@pytest.mark.parametrize("f, ref", [
    (lambda v: v / 0.0, lambda x: x / 0.0),
    (lambda v: v + 1e39, lambda x: x + math.inf),
    (lambda v: v * 0.0 / 0.0, lambda x: torch.full_like(x, math.nan)),
], ids=["x_div_zero", "const_past_fp32", "zero_div_zero"])
def test_constants_fold_to_ieee_inf_and_nan(f, ref):
    x, y = xy()
    x[0, :4] = torch.tensor([0.0, -0.0, 1.0, -2.0])
    ew(x, y, f=f)
    torch.testing.assert_close(y, ref(x), equal_nan=True, rtol=0, atol=0)


def test_fill_past_fp32_range_is_inf():
    def body(X, Y):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64, 64), "float32")
            T.fill(x, -1e39)
            T.copy(x, Y[0, 0])
    x, y = xy()
    run_body(body, x, y)
    assert torch.equal(y, torch.full_like(y, -math.inf))


def test_argument_error_points_at_the_call():
    import linecache

    x, y = xy()
    with pytest.raises(ArgumentError) as err:
        ew(x, y.double(), f=abs_free_identity)  # <- the call site
    file, line = err.value.location.rsplit(":", 1)
    assert file == __file__ and "<- the call site" in linecache.getline(file, int(line))


def test_an_exception_inside_lowering_is_reported_as_a_tilegcn_bug(monkeypatch):
    import tilegcn.compiler

    def broken_pass(kernel, options):
        raise RuntimeError("a pass failed")

    monkeypatch.setattr(tilegcn.compiler, "lower", broken_pass)
    with pytest.raises(CompileError, match=r"internal error while lowering ew .*RuntimeError: a pass failed.*"
                                           r"tilegcn bug") as err:
        tilegcn.jit(ew.fn)(*xy(), f=abs_free_identity)  # a new JITFunction: nothing compiled in this process
    assert isinstance(err.value.__cause__, RuntimeError)  # the original traceback stays chained


def test_a_damaged_meta_json_never_escapes_as_a_raw_error():
    """meta.json without its launch fields (a KeyError in jit once): the entry is rebuilt, or refused with a
    CacheError; the kernel never runs from it and no KeyError reaches the user."""
    import warnings

    x, y = xy()
    entry = _entry(ew.compile(x, y, f=abs_free_identity))
    meta = json.loads((entry / "meta.json").read_text())
    del meta["name"], meta["grid"]
    (entry / "meta.json").write_text(json.dumps(meta))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the cache may warn that it rebuilt the entry
            tilegcn.jit(ew.fn)(x, y, f=abs_free_identity)
    except CacheError as e:
        assert "meta.json" in str(e)
    else:
        assert torch.equal(y, x)


# -- issue 18, launch --
@tilegcn.jit
def _copy_twice(X, Y, Z):
    """Y = X and Z = X: a kernel with two written tensors."""
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((64, 64), "float32")
        T.copy(X[0, 0], x)
        T.copy(x, Y[0, 0])
        T.copy(x, Z[0, 0])


def _overlapping_pair():
    """X and Y views of one storage, Y starting one row into X."""
    base = torch.randn(65 * 64)
    return base[:4096].view(64, 64), base[64:].view(64, 64)


@misuse(ArgumentError, r"tensor X has its negative bit set .*X\.resolve_neg\(\) or X\.clone\(\)")
def arg_neg_view_input(): ew(torch._neg_view(xy()[0]), xy()[1], f=abs_free_identity)
@misuse(ArgumentError, r"tensor X has its negative bit set")
def arg_conj_imag_input(): ew(torch.randn(64, 64, dtype=torch.complex64).conj().imag, xy()[1], f=abs_free_identity)
@misuse(ArgumentError, r"tensor Y has its negative bit set .*Y\.resolve_neg\(\)")
def arg_neg_view_output(): ew(xy()[0], torch._neg_view(torch.zeros(64, 64)), f=abs_free_identity)
@misuse(ArgumentError, r"Y is written by the kernel but is a leaf that requires grad .*in-place operation.*no_grad")
def arg_written_leaf_requires_grad(): ew(xy()[0], torch.zeros(64, 64, requires_grad=True), f=abs_free_identity)
@misuse(ArgumentError, r"Y is written by the kernel but requires grad: autograd does not differentiate.*detach")
def arg_written_nonleaf_requires_grad():
    ew(xy()[0], torch.zeros(64, 64, requires_grad=True) * 2, f=abs_free_identity)
@misuse(ArgumentError, r"Y is written by the kernel and overlaps tensor X in memory without being the same view")
def arg_output_partially_overlaps_input(): ew(*_overlapping_pair(), f=abs_free_identity)
@misuse(ArgumentError, r"Y is written by the kernel and overlaps tensor X")
def arg_output_shifted_by_one_element():
    base = torch.randn(64 * 64 + 1)
    ew(base[:4096].view(64, 64), base[1:].view(64, 64), f=abs_free_identity)
@misuse(ArgumentError, r"tensors Y and Z are both written by the kernel and share memory")
def arg_two_outputs_alias():
    x, y = xy()
    _copy_twice(x, y, y)


def test_lazy_views_and_overlap_are_refused_on_the_warm_path_too():
    """A warm call (same dtypes, shapes, strides, alignment) is checked too: the negative bit, overlap and
    autograd state are not fixed by the specialisation."""
    x, y = xy()
    ew(x, y, f=abs_free_identity)  # warm
    with pytest.raises(ArgumentError, match="negative bit"):
        ew(torch._neg_view(x), y, f=abs_free_identity)
    with pytest.raises(ArgumentError, match="overlaps tensor X"):
        ew(*_overlapping_pair(), f=abs_free_identity)
    with pytest.raises(ArgumentError, match="leaf that requires grad"):
        ew(x, y.clone().requires_grad_(), f=abs_free_identity)


def test_the_same_tensor_in_and_out_and_disjoint_views_of_one_tensor_run():
    """In place (the very same view as input and output) runs, as in TileLang / Triton: each block reads the
    elements it writes. Views of one storage whose bytes interleave but whose elements do not (column halves,
    every other row) run too."""
    x = torch.randn(64, 64)
    ref = x.abs()
    ew(x, x, f=T.abs)
    assert torch.equal(x, ref)
    z = torch.randn(64, 128)
    ref = z[:, :64].abs()
    ew(z[:, :64], z[:, 64:], f=T.abs)
    assert torch.equal(z[:, 64:], ref)
    r = torch.randn(128, 64)
    ref = r[0::2].abs()
    ew(r[0::2], r[1::2], f=T.abs)
    assert torch.equal(r[1::2], ref)


def test_a_kernel_write_bumps_autograd_version_counters():
    """Backward through a tensor the kernel overwrote after autograd saved it raises torch's in-place error
    (it would silently use the new values); under torch.no_grad a leaf that requires grad may be written, as
    an optimizer step writes it."""
    w = torch.randn(64, 64, requires_grad=True)
    a = torch.randn(64, 64)
    loss = (w * a).sum()  # saves a for w's gradient
    version = a._version
    ew(torch.randn(64, 64), a, f=abs_free_identity)  # the kernel overwrites a
    assert a._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    x = torch.randn(64, 64)
    with torch.no_grad():
        ew(x, w, f=abs_free_identity)
    assert torch.equal(w.detach(), x) and w.grad is None
# -- issue 18, autotune --
# A tuning record on disk is data, not code: one whose winner is not one of the configs tuned over (another
# constant, the target arch, a value outside the space, not a config at all) is a warning and a new sweep, never
# a changed result or a raw error; a record that cannot be written keeps the result in memory, with a warning.
@tilegcn.jit
def scaled(X, Y, *, s=2.0, threads=64):
    M, N = X.shape
    with T.Kernel(1, 1, threads=threads) as (bx, by):
        x = T.alloc_fragment((M, N), "float32")
        T.copy(X[0, 0], x)
        for i, j in T.Parallel(M, N):
            x[i, j] = x[i, j] * s
        T.copy(x, Y[0, 0])


def _scaled_tuner():
    from tilegcn.autotune import Autotuner, Score

    return Autotuner(scaled, [dict(threads=64), dict(threads=128)], workers=1, verify=False, progress=False,
                     verbose=False, ranker=lambda kernel, args: Score(kernel.constants["threads"] * 1e-6))


@pytest.mark.parametrize("best", [
    {"threads": 64, "s": 100.0}, {"threads": 64, "arch": "gfx950"}, {"threads": 96}, "threads=64", None, [64]],
    ids=["sets_another_constant", "sets_arch", "value_not_tuned", "a_string", "null", "a_list"])
def test_a_tuning_record_naming_no_config_of_the_space_is_tuned_again(best, cache_dir):
    from tilegcn.autotune import TuneWarning

    x, y = xy(16, 64)
    _scaled_tuner().tune(x, y)
    record_path, = (cache_dir / "tune").glob("*.json")
    record = json.loads(record_path.read_text())
    record["best"] = best
    record_path.write_text(json.dumps(record))
    tuner = _scaled_tuner()  # a new process's tuner
    with pytest.warns(TuneWarning, match=r"ignoring the tuning record .*best config.*tuning again"):
        tuner(x, y)
    assert torch.equal(y, x * 2) and tuner.stats["sweeps"] == 1
    again = _scaled_tuner()
    assert again.tune(x, y) == {"threads": 64} and again.stats == {"sweeps": 0, "disk_hits": 1, "table_hits": 0,
                                                                       "remote_hits": 0}


def test_a_tuning_record_that_is_not_json_is_tuned_again(cache_dir):
    from tilegcn.autotune import TuneWarning

    x, y = xy(16, 64)
    _scaled_tuner().tune(x, y)
    record_path, = (cache_dir / "tune").glob("*.json")
    record_path.write_text('{"format": ')
    with pytest.warns(TuneWarning, match=r"not a JSON object"):
        _scaled_tuner()(x, y)
    assert torch.equal(y, x * 2)


def test_a_tuning_record_that_cannot_be_written_keeps_the_result(cache_dir):
    from tilegcn.autotune import TuneWarning

    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / "tune").write_text("a file where the tune/ folder goes")
    x, y = xy(16, 64)
    tuner = _scaled_tuner()
    with pytest.warns(TuneWarning, match=r"cannot save the tuning result to .*tune.*keeping it in this process"):
        tuner(x, y)
    assert torch.equal(y, x * 2)
    tuner(x, y)  # remembered in memory: no second sweep
    assert tuner.stats["sweeps"] == 1
# -- issue 18, cache --
def _fresh_ew():
    return tilegcn.jit(ew.fn)  # a new JITFunction: nothing compiled in this process, the disk cache is asked


@misuse(CacheError, r"No space left on device.*; the disk is full: free some space, or set TILEGCN_CACHE_DIR",
        located=False)
def cache_entry_written_on_a_full_disk():
    import errno
    import os
    import pathlib
    from unittest import mock

    real = pathlib.Path.write_bytes

    def full(self, data):  # the code object is the largest file: the one that finds the disk full
        if self.name == "kernel.hsaco":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data)

    with mock.patch.object(pathlib.Path, "write_bytes", full):
        _fresh_ew()(*xy(), f=abs_free_identity)


@misuse(CacheError, r"is a symbolic link: tilegcn never writes one there, so it does not load through it.*rm ",
        located=False)
def cache_shard_replaced_by_a_symbolic_link():
    import shutil

    x, y = xy()
    shard = _entry(_fresh_ew().compile(x, y, f=abs_free_identity)).parent
    elsewhere = shard.with_name("elsewhere")
    shutil.copytree(shard, elsewhere)
    shutil.rmtree(shard)
    shard.symlink_to(elsewhere)  # the entry still verifies: only where it lives changed
    _fresh_ew()(x, y, f=abs_free_identity)


@misuse(ArgumentError, r"cannot read the overriding assembly /dev/null: .*not a regular file")
def with_asm_given_a_device_file():
    x, y = xy()
    ew.compile(x, y, f=abs_free_identity).with_asm("/dev/null")
# -- issue 18, trace --
# Device values (block indices, loop variables, T.Parallel indices, runtime scalars and index arithmetic on them)
# have no value while the program is traced: a Python decision on one (`if`, `bool()`, `and`, `in`, the builtin max)
# would be taken once, for every block (SymPy answers `bx == 0` structurally: False), so it is refused at the user's
# line. Inside T.Parallel a comparison itself is a per-element condition for T.if_then_else (tests/test_elemfn.py);
# deciding on it is refused with the same message; outside T.Parallel the comparison is refused at once.
@tilegcn.jit
def _decide(X, Y, n, *, on=None):
    """Y = X, 32 rows a block; `on(v)` runs the case's Python decision on the device values `v`."""
    with T.Kernel(2, threads=64) as bx:
        x = T.alloc_fragment((32, 64), "float32")
        for k in T.Pipelined(1, 2):
            T.copy(X[bx * 32, 0], x)
            for i, j in T.Parallel(32, 64):
                on(dict(bx=bx, k=k, n=n, i=i))
                x[i, j] = x[i, j] * 1.0
            T.copy(x, Y[bx * 32, 0])


def decide(on): _decide(*xy(), 3, on=on)


def _if_bx_is_0(v):
    if v["bx"] == 0:
        pass


def _if_k(v):
    if v["k"]:
        pass


_NO_DEVICE_BRANCH = r"The device decides the tests of `if`.*written in the kernel function itself.*T.if_then_else"


@misuse(CompileError, r"comparison `==` on the block index bx would be decided once.*" + _NO_DEVICE_BRANCH)
def device_if_block_index_eq(): decide(_if_bx_is_0)
@misuse(CompileError, r"comparison `!=` on the block index bx")
def device_block_index_ne(): decide(lambda v: 1 if v["bx"] != 1 else 2)
@misuse(CompileError, r"comparison `<` on the T.Pipelined loop variable")
def device_loop_var_lt(): decide(lambda v: bool(v["k"] < 2))
@misuse(CompileError, r"comparison `<=` on the T.Pipelined loop variable")
def device_loop_var_le(): decide(lambda v: bool(v["k"] <= 1))
@misuse(CompileError, r"comparison `>` on the T.Parallel index i")
def device_parallel_index_gt(): decide(lambda v: bool(v["i"] > 3))
@misuse(CompileError, r"comparison `>=` on the runtime scalar n.*" + _NO_DEVICE_BRANCH)
def device_scalar_ge(): decide(lambda v: bool(v["n"] >= 1))
@misuse(CompileError, r"comparison `==` on the runtime scalar n")
def device_scalar_eq(): decide(lambda v: bool(v["n"] == 3))
@misuse(CompileError, r"truth test on the device condition `bx < 1` would be decided once")
def device_comparison_outside_parallel():  # bool() is not an `if` statement the kernel's source rewrite sees
    def body(X, Y):
        with T.Kernel(2, threads=64) as bx:
            bool(bx < 1)
    run_body(body)


@misuse(CompileError, r"comparison `>=` on the block index bx")  # 0 <= bx is asked as bx >= 0
def device_chained_comparison(): decide(lambda v: 0 <= v["bx"] < 2)
@misuse(CompileError, r"truth test .* on the block index bx")
def device_bool_block_index(): decide(lambda v: bool(v["bx"]))
@misuse(CompileError, r"truth test .* on the T.Pipelined loop variable")
def device_if_loop_var(): decide(_if_k)
@misuse(CompileError, r"truth test .* on the T.Parallel index i")
def device_not_parallel_index(): decide(lambda v: not v["i"])
@misuse(CompileError, r"truth test .* on the block index bx")
def device_and(): decide(lambda v: v["bx"] and 1)
@misuse(CompileError, r"truth test .* on the runtime scalar n")
def device_or(): decide(lambda v: v["n"] or 1)
@misuse(CompileError, r"comparison `==` on `32\*bx \+ 1`, which depends on the block index bx")
def device_index_arithmetic_eq(): decide(lambda v: bool(v["bx"] * 32 + 1 == 33))
@misuse(CompileError, r"comparison `>` on .*which depends on the runtime scalar n")
def device_ceildiv_of_scalar_gt(): decide(lambda v: bool(T.ceildiv(v["n"], 2) > 1))
@misuse(CompileError, r"comparison `==` on the block index bx")  # `in` compares each item with ==
def device_membership(): decide(lambda v: v["bx"] in (0, 1))
@misuse(CompileError, r"comparison `[<>]` on the T.Pipelined loop variable")  # the builtin max compares
def device_builtin_max(): decide(lambda v: max(v["k"], 1))
@misuse(CompileError, r"the block index bx is known only on the device.*range\(\)")
def device_range_of_block_index(): decide(lambda v: range(v["bx"]))


# T.Pipelined reads (start, stop) as TileLang does; what it cannot run is refused, never run as another loop.
def pipelined_range(*args, **kw):
    def body(X, Y):
        with T.Kernel(1, threads=64):
            for k in T.Pipelined(*args, **kw):
                pass
    return body


@misuse(CompileError, r"T.Pipelined\(3, 1\): trip count must be positive, got -2")
def pipelined_stop_before_start(): run_body(pipelined_range(3, 1))
@misuse(CompileError, r"T.Pipelined\(-1, 2\): a negative start is not supported")
def pipelined_negative_start(): run_body(pipelined_range(-1, 2))
@misuse(CompileError, r"T.Pipelined\(order=...\) is not supported.*num_stages")
def pipelined_order(): run_body(pipelined_range(0, 2, num_stages=2, order=[0, 1]))
@misuse(CompileError, r"T.Pipelined stop must be an integer, got n \(runtime float32 scalar\)")
def pipelined_runtime_stop(): _loop_from_1_to(xy()[0], 4.0)  # an int one is a device bound (test_control_flow.py)


@tilegcn.jit
def _loop_from_1_to(X, n):
    with T.Kernel(1, threads=64):
        for k in T.Pipelined(1, n):
            pass


# arch="" is no arch (it used to mean the default one)
@misuse(UnsupportedArchError, r"unsupported arch ''.*gfx942, gfx950", located=False)
def call_arch_empty(): run_ew(lambda v: v, arch="")
@misuse(UnsupportedArchError, r"unsupported arch ''.*gfx942, gfx950", located=False)
def compile_arch_empty(): ew.compile(*xy(), f=abs_free_identity, arch="")
@misuse(UnsupportedArchError, r"unsupported arch ''.*gfx942, gfx950", located=False)
def jit_decorator_arch_empty(): tilegcn.jit(arch="")(lambda X: None)
@misuse(UnsupportedArchError, r"unsupported arch ''.*gfx942, gfx950", located=False)
def autotune_call_arch_empty(): tilegcn.autotune(configs=[{"block_M": 64}])(ew)(*xy(), f=abs_free_identity, arch="")
@misuse(UnsupportedArchError, r"unsupported arch ''.*gfx942, gfx950", located=False)
def emulator_load_arch_empty():
    from tilegcn.runtime import get_device

    get_device("emulator").load(ew.compile(*xy(), f=abs_free_identity).hsaco, arch="")


# A fragment past the register budget is refused from its size, at its allocation, before any lowering (lowering
# it took 8.6 s at 2^10 rows, 216 s at 2^14 and ended in an internal error at 2^40).
@misuse(ResourceError, r"fragment x \(float32\[1024, 64\]\) spread over 128 threads needs at least 512 VGPRs "
                       r"per thread, and gfx950 has 256 .*smaller tile")
def fragment_past_the_register_budget(): run_ew(abs_free_identity, block_M=2 ** 10, arch="gfx950")
@misuse(ResourceError, r"fragment x \(float32\[16384, 64\]\).*needs at least 8192 VGPRs")
def fragment_of_2_to_the_14_rows(): run_ew(abs_free_identity, block_M=2 ** 14)
@misuse(ResourceError, r"fragment x \(float32\[1099511627776, 64\]\).*needs at least \d+ VGPRs")
def fragment_of_2_to_the_40_rows(): run_ew(abs_free_identity, block_M=2 ** 40)
# -- issue 18, emu --
from tilegcn.asm_override import AsmVerifyError  # noqa: E402


def _asm_kernel(body="s_endpgm"):
    """A hand-written kernel (no arguments) assembled with LLVM: (hsaco bytes, its module on the emulator)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from asm.emukit import kernel_asm
    from tilegcn.runtime import get_device
    from tilegcn.toolchain import assemble

    hsaco = assemble(kernel_asm(body, args=()), "gfx942")
    return hsaco, get_device("emulator").load(hsaco)


def _metadata_at(hsaco):
    """Offset of the msgpack metadata in the AMDGPU note (after its 12-byte header and the name "AMDGPU\\0" + pad)."""
    return hsaco.index(b"AMDGPU\0\0") + 8


@misuse(DeviceError, r"damaged code object .*past the end of the file", located=False)
def emulator_truncated_code_object():
    from tilegcn.runtime import get_device

    hsaco, _ = _asm_kernel()
    get_device("emulator").load(hsaco[:len(hsaco) // 2])


@misuse(DeviceError, r"metadata is not valid msgpack: an array .* claims 4294967295 items", located=False)
def emulator_msgpack_note_bomb():
    from tilegcn.runtime import get_device

    hsaco, _ = _asm_kernel()
    at = _metadata_at(hsaco)
    get_device("emulator").load(hsaco[:at] + b"\xdd\xff\xff\xff\xff" + hsaco[at + 5:])


@misuse(DeviceError, r"metadata is not valid msgpack: a string .* needs 4294967295 bytes", located=False)
def emulator_msgpack_string_bomb():
    from tilegcn.runtime import get_device

    hsaco, _ = _asm_kernel()
    at = _metadata_at(hsaco)
    get_device("emulator").load(hsaco[:at] + b"\xdb\xff\xff\xff\xff" + hsaco[at + 5:])


@misuse(DeviceError, r"grid \(4294967296, 1, 1\).*at most 2\^32-1 per dimension", located=False)
def emulator_grid_beyond_the_dispatch_packet():
    _, module = _asm_kernel()
    module.launch("k", (2**32, 1, 1), (64, 1, 1), [])


@misuse(DeviceError, r"grid \(65536, 65536, 1\) has 4294967296 workgroups; the emulated device would take hours",
        located=False)
def emulator_grid_that_would_take_hours():
    _, module = _asm_kernel()
    module.launch("k", (2**16, 2**16, 1), (64, 1, 1), [])


def _launch_with_env(name, value):
    import os

    _, module = _asm_kernel()
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        module.launch("k", (1, 1, 1), (64, 1, 1), [])
    finally:
        os.environ.pop(name)
        if before is not None:
            os.environ[name] = before


@misuse(DeviceError, r"TILEGCN_EMULATOR_MAX_STEPS must be a positive whole number .*'abc'", located=False)
def emulator_max_steps_not_a_number(): _launch_with_env("TILEGCN_EMULATOR_MAX_STEPS", "abc")
@misuse(DeviceError, r"TILEGCN_EMULATOR_THREADS must be a positive whole number .*'two'", located=False)
def emulator_threads_not_a_number(): _launch_with_env("TILEGCN_EMULATOR_THREADS", "two")


@misuse(AsmVerifyError, r"(?s)HazardError: .*s_waitcnt.*without the checks it then fails", located=False)
def with_asm_verify_on_an_edit_without_waits():
    import os
    from pathlib import Path

    x, y = xy(16, 64)
    k = ew.compile(x, y, f=abs_free_identity)
    edited = Path(os.environ["TILEGCN_CACHE_DIR"]).parent / "no_waits.s"  # the test's own tmp_path
    edited.write_text("\n".join(ln for ln in k.asm.splitlines() if "s_waitcnt" not in ln) + "\n")
    k.with_asm(edited, verify=True, args=(x, y))
