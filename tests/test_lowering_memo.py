"""The lowering's memoised SymPy helpers (amdgcn/symcache.py, amdgcn/addr.py) give SymPy's own answers, and a
kernel's assembly does not depend on what the process compiled before."""
import random

import pytest
import sympy
import torch

from tilegcn import language as T
from tilegcn.amdgcn import symcache
from tilegcn.amdgcn.addr import split_floor_div, value_range
from tilegcn.ir import TensorSpec
from tilegcn.passes import lower

from kernels import gemm

TID = sympy.Symbol("tid", integer=True, nonnegative=True)
BX = sympy.Symbol("bx", integer=True, nonnegative=True)
ATOMS = [TID, BX, sympy.Mod(TID, 64), sympy.floor(sympy.Mod(TID, 64) / 32), sympy.floor(TID / 8),
         sympy.Mod(sympy.floor(TID / 4), 2), TID * BX, sympy.floor(BX / 3)]


def random_sums(n: int, seed: int = 0):
    """Sums of rational multiples of address atoms, products of symbols among them (what floor() wraps)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        e = sum((sympy.Rational(rng.choice([-6, -3, -1, 1, 2, 3, 4, 6, 9]), rng.choice([1, 2, 3, 4, 8, 32]))
                 * rng.choice(ATOMS) for _ in range(rng.randint(1, 4))), sympy.Rational(rng.randint(0, 7), rng.choice([1, 2, 4])))
        if isinstance(e, sympy.Add):
            out.append(e)
    return out


def test_floor_division_split_agrees_with_sympy_together():
    """split_floor_div takes a shortcut for sums of rational multiples of atoms; sympy.together is the oracle."""
    floors = [f for f in map(sympy.floor, random_sums(120)) if isinstance(f, sympy.floor)]  # floor(x + 6) isn't
    assert len(floors) > 10
    for f in floors:
        num, den = sympy.fraction(sympy.together(f.args[0]))
        expected = (num, int(den)) if den.is_Integer and den > 1 else None
        assert split_floor_div(f) == expected, f


def test_free_symbols_memo_agrees_with_sympy():
    for e in random_sums(100, seed=1):
        assert symcache.free_symbols(e) == e.free_symbols


def test_value_range_memo_keys_on_the_ranges_too():
    expr = 4 * TID + sympy.floor(TID / 8)
    assert value_range(expr, {TID: (0, 63)}) == (0, 259)
    assert value_range(expr, {TID: (0, 255)}) == (0, 1051)  # same expression, other ranges: not the memoised one
    assert value_range(expr, {BX: (0, 3)}) is None


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_assembly_does_not_depend_on_memoised_results(arch):
    """The same GEMM lowered with the memos empty, warm from itself, and warm from another GEMM: one text."""
    def lowered(transpose_B: bool) -> str:
        b_shape = (128, 64) if transpose_B else (64, 128)
        args = [TensorSpec.of(torch.empty(s, dtype=torch.bfloat16)) for s in ((128, 64), b_shape, (128, 128))]
        kernel = T.trace(gemm.fn, args, dict(block_M=128, block_N=128, block_K=64, threads=256,
                                             transpose_B=transpose_B, num_stages=1), arch)
        return lower(kernel, arch).asm

    symcache.clear()
    cold = lowered(False)
    assert lowered(False) == cold
    symcache.clear()
    lowered(True)
    assert lowered(False) == cold
