"""Silent wrong answers, each reproduced (every test here failed before its fix) and compared with torch.

Cross-thread fragment reads, Python logic on element expressions, 0.0 vs -0.0 constants, int scalars out
of range, odd-length 16-bit tensors, halo reads below a tile's origin, and the numerics of unary minus,
T.max/T.min with NaN, division and exp.
"""
import math

import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import ArgumentError, CompileError

ARCHES = ["gfx942", "gfx950"]


def same_bits(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Elementwise: equal bit patterns, or both NaN."""
    return (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())


@tilegcn.jit
def unary(X, Y, *, op="neg", c=0.0):
    (N,) = X.shape
    with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
        x = T.alloc_fragment((256,), "float32")
        T.copy(X[bx * 256], x)
        for i in T.Parallel(256):
            if op == "neg":
                x[i] = -x[i]
            elif op == "exp":
                x[i] = T.exp(x[i])
            elif op == "div_const":
                x[i] = x[i] / c
            elif op == "recip_scaled":
                x[i] = 1.0 / (x[i] * c)
            elif op == "max_const":
                x[i] = T.max(x[i], c)
            elif op == "min_const":
                x[i] = T.min(x[i], c)
        T.copy(x, Y[bx * 256])


@tilegcn.jit
def binary(X, Z, Y, *, op="div"):
    (N,) = X.shape
    with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
        x = T.alloc_fragment((256,), "float32")
        z = T.alloc_fragment((256,), "float32")
        T.copy(X[bx * 256], x)
        T.copy(Z[bx * 256], z)
        for i in T.Parallel(256):
            if op == "div":
                x[i] = x[i] / z[i]
            elif op == "max":
                x[i] = T.max(x[i], z[i])
            else:
                x[i] = T.min(x[i], z[i])
        T.copy(x, Y[bx * 256])


SPECIALS = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-40, 3e38, -3e38, 1.0, -7.0, 1e-38])


def _pairs():
    """Every pair of special values, then wide-range random operands."""
    torch.manual_seed(0)
    n = 4096
    x = torch.randn(n) * torch.exp(torch.randn(n) * 20)
    z = torch.randn(n) * torch.exp(torch.randn(n) * 20)
    k = len(SPECIALS)
    x[:k * k], z[:k * k] = SPECIALS.repeat_interleave(k), SPECIALS.repeat(k)
    return x, z


# ---- fragment reads inside T.Parallel ------------------------------------------------------------------------

@tilegcn.jit
def transpose_read(X, Y, *, form="ji"):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((64, 64), "float32")
        T.copy(X[0, 0], x)
        for i, j in T.Parallel(64, 64):
            if form == "ji":
                x[i, j] = x[j, i]
            elif form == "i0":
                x[i, j] = x[i, 0] + 1.0
            else:
                x[i, j] = x[63 - i, j]
        T.copy(x, Y[0, 0])


@pytest.mark.parametrize("form", ["ji", "i0", "63-i"])
def test_fragment_read_at_another_threads_index(form):
    """Other threads' elements are read through LDS, every read before the statement's writes (an in-place
    transpose reads the old values)."""
    x = torch.randn(64, 64)
    y = torch.empty_like(x)
    transpose_read(x, y, form=form, arch="gfx942")
    want = {"ji": x.T, "i0": x[:, :1].expand(64, 64) + 1.0, "63-i": x.flip(0)}[form]
    assert torch.equal(y, want)


@tilegcn.jit
def read_past_the_end(X, Y):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((64, 64), "float32")
        T.copy(X[0, 0], x)
        for i, j in T.Parallel(64, 64):
            x[i, j] = x[64 - i, j]
        T.copy(x, Y[0, 0])


def test_fragment_read_past_its_end_is_refused_at_the_line():
    x = torch.randn(64, 64)
    with pytest.raises(CompileError, match=r"index on dim 0 is 64, outside its size 64") as e:
        read_past_the_end(x, torch.empty_like(x), arch="gfx942")
    assert e.value.location.endswith(f"{__file__}:{_line_of(read_past_the_end.fn, '64-i')}")


def _line_of(fn, form: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(fn)
    marker = {"ji": "x[j, i]", "i0": "x[i, 0]", "63-i": "x[63 - i, j]", "64-i": "x[64 - i, j]"}[form]
    return first + next(n for n, text in enumerate(lines) if marker in text and "=" in text.split(marker)[0])


@tilegcn.jit
def half_fragment_copy(X, Y):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((64, 8), "float32")
        T.copy(X[0, 0], x)
        T.copy(x[0:32, 0:8], Y[0, 0])


def test_copy_of_part_of_a_fragment_is_refused():
    x = torch.randn(64, 8)
    with pytest.raises(CompileError, match="takes a whole fragment"):
        half_fragment_copy(x, torch.zeros(64, 8), arch="gfx942")


@tilegcn.jit
def python_logic(X, Y, *, form="=="):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0], x)
        for i in T.Parallel(64):
            if form == "==":
                x[i] = x[i] == 0.0
            elif form == "!=":
                x[i] = x[i] != 1.0
            elif form == "and":
                x[i] = x[i] and 1.0
            else:
                x[i] = 1.0 if x[i] else 2.0
        T.copy(x, Y[0])


@pytest.mark.parametrize("form, refusal", [
    ("==", r"x\[pi\] == 0\.0: a comparison is a condition, not an element value.*T\.if_then_else"),
    ("!=", r"x\[pi\] != 1\.0: a comparison is a condition"),
    ("and", "decided once, while tracing"), ("if", "decided once, while tracing")])
def test_python_comparisons_and_truth_tests_are_refused(form, refusal):
    """A comparison of elements is a per-element condition (T.if_then_else picks with it), never a trace-time bool
    nor a stored value; Python's `and` / `if` on an element would decide once while tracing."""
    x = torch.randn(64)
    with pytest.raises(CompileError, match=refusal):
        python_logic(x, torch.empty_like(x), form=form, arch="gfx942")


# ---- specialisation and arguments ------------------------------------------------------------------------------

def test_zero_and_negative_zero_constants_are_different_specialisations():
    x = torch.rand(256) + 0.5
    y = torch.empty(256)
    for c in (0.0, -0.0, 0.0):
        unary(x, y, op="recip_scaled", c=c)
        assert torch.equal(y, 1.0 / (x * c)), c


@tilegcn.jit
def add_int(X, Y, n):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0], x)
        for i in T.Parallel(64):
            x[i] = x[i] + n
        T.copy(x, Y[0])


def test_int_scalars_are_int32_and_out_of_range_values_are_refused():
    x, y = torch.zeros(64), torch.empty(64)
    for n in (2**31 - 1, -2**31):
        add_int(x, y, n)
        assert torch.equal(y, torch.full((64,), float(n)))
    for n in (2**31, 2**40, -2**31 - 1):
        with pytest.raises(ArgumentError, match="outside the 32-bit signed range"):
            add_int(x, y, n)
    with pytest.raises(ArgumentError, match="outside the range of a 32-bit float"):
        add_int(x, y, 1e39)


# ---- memory -----------------------------------------------------------------------------------------------------

@tilegcn.jit
def copy1d(X, Y, *, block=128, widen=True):
    (N,) = X.shape
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        x = T.alloc_fragment((block,), "float32" if widen else X.dtype)
        T.copy(X[bx * block], x)
        T.copy(x, Y[bx * block])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [1, 127, 301])
def test_odd_length_16_bit_tensors_keep_their_last_element(dtype, n):
    x = torch.randn(n).to(dtype)
    for widen in (True, False):
        y = torch.zeros(n + 2, dtype=dtype)
        copy1d(x, y[:n], widen=widen)
        assert torch.equal(y[:n], x) and not y[n:].any()


@tilegcn.jit
def shifted(X, Y, *, block=64, shift=1):
    (N,) = X.shape
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        y = T.alloc_fragment((block,), "float32")
        for i in T.Parallel(block):
            y[i] = X[bx * block + i - shift]
        T.copy(y, Y[bx * block])


@tilegcn.jit
def shifted_columns(X, Y, *, shift=1):
    M, N = X.shape
    with T.Kernel(M, threads=64) as bx:
        y = T.alloc_fragment((1, 64), "float32")
        for i, j in T.Parallel(1, 64):
            y[i, j] = X[bx, j - shift]
        T.copy(y, Y[bx, 0])


@pytest.mark.parametrize("shift", [1, 5])
def test_halo_reads_below_a_tile_origin(shift):
    """Elements below a tile's origin are read where they are inside the tensor (X[bx*64 - 1] of the
    previous tile) and read 0 where they are outside (before the start, or before a row's start)."""
    x = torch.arange(1, 257, dtype=torch.float32)
    y = torch.empty(256)
    shifted(x, y, shift=shift)
    assert torch.equal(y, torch.cat([torch.zeros(shift), x[:-shift]]))
    x2 = x.reshape(4, 64)
    y2 = torch.empty(4, 64)
    shifted_columns(x2, y2, shift=shift)
    assert torch.equal(y2, torch.cat([torch.zeros(4, shift), x2[:, :-shift]], dim=1))


# ---- numerics ---------------------------------------------------------------------------------------------------

def test_unary_minus_flips_the_sign_of_zero():
    x = SPECIALS.repeat(22)[:256]
    y = torch.empty(256)
    unary(x, y, op="neg")
    assert bool(same_bits(y, -x).all())


@pytest.mark.parametrize("arch", ARCHES)
def test_max_and_min_propagate_nan_like_torch(arch):
    x, z = _pairs()
    y = torch.empty_like(x)
    for op, ref in (("max", torch.maximum), ("min", torch.minimum)):
        binary(x, z, y, op=op, arch=arch)
        want = ref(x, z)
        assert bool((y.isnan() == want.isnan()).all()), op
        assert torch.equal(y[~want.isnan()], want[~want.isnan()]), op
    xs = x[:256].clone()
    xs[::3] = math.nan
    ys = torch.empty(256)
    for c in (0.0, 2.5, math.nan):  # values compared with ==: neither torch nor tilegcn orders -0.0 and 0.0
        for op, ref in (("max_const", torch.maximum), ("min_const", torch.minimum)):
            unary(xs, ys, op=op, c=c, arch=arch)
            want = ref(xs, torch.tensor(c))
            assert bool(((ys == want) | (ys.isnan() & want.isnan())).all()), (op, c)


def _denormal_divisor_overflow(x, z):
    """x / z with z an f32 denormal and the quotient past f32's range (see docs/refusals.md: the emulator's
    v_div_scale/v_div_fixup model gives NaN there, torch gives +-inf)."""
    return (z != 0) & (z.abs() < 2.0**-126) & ((x.double() / z.double()).abs() > 3.4028234663852886e38)


@pytest.mark.parametrize("arch", ARCHES)
def test_division_is_correctly_rounded(arch):
    x, z = _pairs()
    y = torch.empty_like(x)
    binary(x, z, y, op="div", arch=arch)
    ok = same_bits(y, x / z) | _denormal_divisor_overflow(x, z)
    assert bool(ok.all()), (x[~ok][:4], z[~ok][:4], y[~ok][:4])
    for c in (3.0, 0.1, 0.0, -0.0, 2.0**-127, 0.25):
        unary(x, y, op="div_const", c=c, arch=arch)
        assert bool(same_bits(y, x / c).all()), c


@pytest.mark.parametrize("arch", ARCHES)
def test_exp_is_within_one_ulp_of_torch(arch):
    torch.manual_seed(1)
    x = torch.randn(4096) * 40
    x[:len(SPECIALS)] = SPECIALS
    x[20:24] = torch.tensor([88.72, 88.73, -103.2, -103.3])  # overflow and underflow ends
    y = torch.empty_like(x)
    unary(x, y, op="exp", arch=arch)
    want = torch.exp(x)
    assert bool((y.isnan() == want.isnan()).all())
    finite = ~want.isnan()
    ulps = (y[finite].view(torch.int32).long() - want[finite].view(torch.int32).long()).abs()
    assert int(ulps.max()) <= 1


def _llvm_mc_accepts(arch, line):
    """Whether LLVM's assembler takes `line` for `arch`: the outside oracle for an arch table's instruction facts."""
    import subprocess

    from tilegcn.toolchain import find_llvm

    mc = find_llvm(arch).tool("llvm-mc")
    run = subprocess.run([str(mc), "-arch=amdgcn", f"-mcpu={arch}"], input=line + "\n", capture_output=True,
                         text=True)
    return run.returncode == 0 and "error" not in run.stderr


@pytest.mark.parametrize("arch", ARCHES)
def test_arch_table_nan_propagating_max_matches_llvm_mc(arch):
    """The arch fact behind T.max/T.min's choice of instruction, checked against the assembler."""
    from tilegcn.amdgcn.arch import get_arch

    assert _llvm_mc_accepts(arch, "v_maximum3_f32 v0, v1, v2, v2") == get_arch(arch).has_ieee_maximum3


@pytest.mark.parametrize("arch", ARCHES)
def test_arch_table_transposing_lds_read_matches_llvm_mc(arch):
    """The arch facts behind T.gemm's read of an operand stored (K, X) (ds_read_b64_tr_b16, ds_read_b64_tr_b8 for
    8-bit elements), checked against the assembler."""
    from tilegcn.amdgcn.arch import get_arch

    assert _llvm_mc_accepts(arch, "ds_read_b64_tr_b16 v[0:1], v2") == get_arch(arch).has_ds_read_tr_b16
    assert _llvm_mc_accepts(arch, "ds_read_b64_tr_b8 v[0:1], v2") == get_arch(arch).has_ds_read_tr_b8
