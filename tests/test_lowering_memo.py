"""The lowering's memoised SymPy helpers (amdgcn/symcache.py, amdgcn/addr.py) give SymPy's own answers, the
builder's shortcuts build what its general path builds, and a kernel's assembly does not depend on what the
process compiled before."""
import random

import numpy as np
import pytest
import sympy
import torch

from tilegcn import language as T
from tilegcn.amdgcn import symcache
from tilegcn.amdgcn.addr import ExprLowering, Xor, add_constant, linear_form, split_floor_div, value_range
from tilegcn.amdgcn.arch import get_arch
from tilegcn.amdgcn.builder import KernelBuilder
from tilegcn.amdgcn.isa import VCC
from tilegcn.amdgcn.memory import _exact_span
from tilegcn.ir import TensorSpec
from tilegcn.compiler import lower

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


def test_linear_form_agrees_with_sympy():
    """linear_form (memoised per subexpression) is the expression again, integer coefficients on atoms, whether its
    terms are met for the first time or again, scaled and added into a form being built."""
    sums = random_sums(30, seed=2) + [4 * sympy.Add(TID, sympy.floor(TID / 8), 3, evaluate=False)]
    symcache.clear()
    for again in (False, True):
        for e1, e2 in zip(sums, sums[1:]):
            form = linear_form(e1)
            assert all(isinstance(c, int) for c in form.values())
            assert sympy.Add(*(c * a for a, c in form.items())) == sympy.expand(e1), (e1, again)
            both = linear_form(e2, 5, linear_form(e1, 3))
            assert sympy.Add(*(c * a for a, c in both.items())) == sympy.expand(3 * e1 + 5 * e2), (e1, e2, again)


def test_add_constant_builds_what_sympy_builds():
    """add_constant's shortcut (no Add.flatten) gives SymPy's own canonical sum: equal, the same hash, args and
    srepr, for sums with and without a number of their own, single atoms, and constants that cancel one."""
    exprs = random_sums(40, seed=4) + [sympy.expand(e * 8) for e in random_sums(10, seed=5)] + ATOMS + \
        [-3 * TID, 16 * sympy.Mod(TID, 32) * BX]
    for e in exprs:
        for k in (1, -1, 7, 4096, -4096, -e.as_coeff_Add()[0] if e.as_coeff_Add()[0].is_Integer else 2):
            got, want = add_constant(e, int(k)), e + int(k)
            assert got == want and hash(got) == hash(want) and got.args == want.args, (e, k)
            assert sympy.srepr(got) == sympy.srepr(want), (e, k)


def test_exact_lane_span_agrees_with_sympy():
    """The span of a per-lane offset over the threads (evaluated in integers, no longer by sympy.lambdify) is the
    span of SymPy's own values, lane by lane."""
    atoms = [a for a in ATOMS if a.free_symbols == {TID}]
    rng = random.Random(3)
    for _ in range(8):
        e = (sum(rng.choice([-16, -3, 1, 4, 64]) * rng.choice(atoms) for _ in range(3))
             + sympy.floor(rng.choice(atoms) / rng.choice([3, 8])) + sympy.Mod(rng.choice(atoms) + 1, rng.choice([2, 6])))
        values = [int(e.subs(TID, t)) for t in range(64)]
        assert _exact_span(e, TID, 64) == (min(values), max(values)), e


def test_an_xor_atom_is_bounded_evaluated_and_lowered_as_one_instruction():
    """The LDS swizzle's Xor(a, b): value_range bounds every lane's value, the exact span is SymPy's lane by lane
    (lambdify's numpy code agrees), and a VGPR gets it with one v_xor_b32 on top of its operands."""
    rng = random.Random(5)
    lane_atoms = [sympy.Mod(TID, 8), sympy.floor(TID / 4), sympy.Mod(sympy.floor(TID / 16), 4), TID]
    for _ in range(12):
        a = rng.choice(lane_atoms) * rng.choice([1, 2, 16]) + rng.choice([0, 3, 40])
        e = rng.choice([1, 16]) * Xor(a, rng.choice(lane_atoms[:3])) + rng.choice([0, 7])
        values = [int(e.subs(TID, t)) for t in range(256)]
        assert _exact_span(e, TID, 256) == (min(values), max(values)), e
        assert list(sympy.lambdify(TID, e, "numpy")(np.arange(256))) == values, e
        lo, hi = value_range(e, {TID: (0, 255)})
        assert lo <= min(values) and max(values) <= hi, e
    b = KernelBuilder(get_arch("gfx950"), "k")
    b.lane_symbols.add(TID)
    b.symbol_regs[TID] = b.v.alloc()
    low = ExprLowering(b)
    row, chunk = sympy.floor(TID / 8), sympy.Mod(TID, 8)
    low.vgpr(row)
    low.vgpr(chunk)
    before = len(b.insts)
    low.vgpr(Xor(chunk, row))
    assert [i.op for i in b.insts[before:]] == ["v_xor_b32"]


def test_valu_builds_what_emit_builds():
    """builder.valu, the shortcut for plain VALU instructions, makes the instruction emit() makes (defs, uses
    with repeated and special registers, kind), in the frame asked for."""
    b = KernelBuilder(get_arch("gfx942"), "k")
    x, y, z = b.v.alloc(), b.v.alloc(), b.s.alloc()
    cases = [("v_add3_u32", x, y, z, 5), ("v_cndmask_b32", x, x, y, VCC), ("v_mov_b32", y, 0x12345678),
             ("v_bfe_u32", x, y, 16, 1), ("v_accvgpr_read_b32", y, b.a.alloc()), ("v_mov_b32", x, 0.5)]
    for op, dst, *srcs in cases:
        assert b.valu(op, dst, *srcs) == b.emit(op, dst, *srcs), op
    assert b.insts[-2:][0] == b.insts[-1]
    with b.loop_frame(BX, z):
        b.valu("v_mov_b32", x, y, frame=0)
        assert not b.frames[1].insts and b.frames[0].insts[-1].op == "v_mov_b32"


def test_vgpr_plus_finds_and_makes_what_vgpr_does():
    """ExprLowering.vgpr_plus(base, c), the shortcut for an address that is a base plus an integer, gives the
    registers and instructions vgpr(base + c) gives, whichever of the two made the value first: in loop frames (a
    value of the loop variable is forgotten with its loop), under an EXEC mask (whose values are forgotten after it),
    and for bases holding a number (the general path)."""
    k = sympy.Symbol("k", integer=True, nonnegative=True)
    base = 16 * sympy.floor(TID / 8) + 4 * sympy.Mod(TID, 8) + sympy.Mod(sympy.floor(TID / 4) + BX, 2)
    plus = lambda low, e, c: low.vgpr_plus(e, c)  # noqa: E731
    whole = lambda low, e, c: low.vgpr(add_constant(e, c))  # noqa: E731
    steps = [(plus, base, 32), (whole, base, 32), (whole, base, 64), (plus, base, 64), (plus, base, 0),
             (plus, base + 5, 3), (whole, base, 8),
             ("loop",), (plus, base, 32), (plus, base + 64 * k, 32), (plus, base, 512), ("end",),
             ("loop",), (whole, base + 64 * k, 32), (plus, base + 64 * k, 32), ("end",),
             ("mask",), (plus, base, 96), ("end",), (whole, base, 96), (plus, base, 96)]

    def lowered(use_plus: bool) -> list:
        b = KernelBuilder(get_arch("gfx942"), "k")
        b.lane_symbols.add(TID)
        b.symbol_regs.update({TID: b.v.alloc(), BX: b.s.alloc()})
        low, scopes = ExprLowering(b), []
        for step in steps:
            if step[0] in ("loop", "mask"):
                scopes.append((b.loop_frame(k, b.s.alloc()) if step[0] == "loop" else b.lanes_masked(), step[0]))
                scopes[-1][0].__enter__()
            elif step[0] == "end":
                scope, kind = scopes.pop()
                body = b.frames[-1].insts
                scope.__exit__(None, None, None)
                if kind == "loop":
                    b.frames[-1].insts.extend(body)  # as passes/pipeline.py closes a loop
            else:
                way, e, c = step
                got = (way if use_plus else whole)(low, e, c)
                assert got is low.vgpr(add_constant(e, c))  # found again by the general path
        return b.insts

    reference, mixed = lowered(False), lowered(True)
    assert [i.op for i in reference].count("v_add_u32") >= 6  # the shifted values are made, once each per scope
    assert mixed == reference


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
