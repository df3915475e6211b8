"""Layouts as objects (tilegcn/ir/layout.py): every layout's coords, evaluated on every thread, hold every element
of the fragment (once per thread at most, once in all where it does not replicate), and its writer() picks
exactly one thread per element. MFMA layouts are checked against the formulas the MFMA emulator gathers
with (amdgcn/mfma_layout.py) and the gemm plan's accumulator map."""
import itertools
import math

import pytest

from tilegcn.amdgcn import mfma_layout
from tilegcn.amdgcn.arch import get_arch
from tilegcn.ir.layout import (Blocked, MfmaAccumulator, MfmaOperand, Replicated, Slice, holders, register_of,
                               replicated_bits, writers)
from tilegcn.passes.gemm_plan import plan_gemm
from tilegcn.passes.layout_inference import accumulator_layout


def _every_element(shape):
    return set(itertools.product(*(range(e) for e in shape)))


def _check_complete(layout, copies_per_element=None):
    """Every element held, by `copies_per_element` threads when given; no thread holds one element twice; every
    element written by exactly one (thread, register)."""
    held = holders(layout)
    assert set(held) == _every_element(layout.shape)
    for index, where in held.items():
        threads = [t for t, _ in where]
        assert len(threads) == len(set(threads)), f"{index} twice in one thread"
        if copies_per_element is not None:
            assert len(where) == copies_per_element, index
    written = writers(layout)
    assert set(written) == set(held)
    assert all(len(w) == 1 for w in written.values())
    assert all(w[0] in held[index] for index, w in written.items())
    return held


@pytest.mark.parametrize("shape, threads, run", [((64, 64), 256, 4), ((4, 4096), 256, 4), ((8, 4, 32), 128, 2),
                                                 ((256,), 256, 1)])
def test_blocked_holds_every_element_once(shape, threads, run):
    layout = Blocked(shape, threads, run)
    assert layout.elems == math.prod(shape) // threads and layout.writer(0) is None
    held = _check_complete(layout, copies_per_element=1)
    for index, [(t, r)] in held.items():  # runs of `run` consecutive elements along the last dim, in registers
        if r % run:
            assert held[index[:-1] + (index[-1] - 1,)] == [(t, r - 1)]


@pytest.mark.parametrize("shape, threads", [((64,), 256), ((1,), 128), ((3,), 256), ((2, 8), 64)])
def test_blocked_smaller_than_the_threads_replicates(shape, threads):
    layout = Blocked(shape, threads, 1)
    numel = math.prod(shape)
    assert layout.elems == 1 and layout.replicated
    held = _check_complete(layout)
    assert sum(len(w) for w in held.values()) == threads  # every thread holds one element
    assert min(len(w) for w in held.values()) >= threads // numel


def test_replicated_is_held_by_every_thread():
    layout = Replicated((2, 3), 64)
    _check_complete(layout, copies_per_element=64)
    assert register_of(layout, (1, 2)) == 5


@pytest.mark.parametrize("arch, M, N, threads", [("gfx942", 128, 128, 256), ("gfx950", 256, 128, 256),
                                                 ("gfx942", 64, 64, 64)])
def test_mfma_accumulator_is_the_gemm_plan_map(arch, M, N, threads):
    plan = plan_gemm(arch, "bf16", M, N, 64, threads=threads, transpose_A=False, transpose_B=False)
    layout = accumulator_layout(plan, threads)
    assert layout.elems == plan.acc_regs_per_lane
    held = _check_complete(layout, copies_per_element=1)
    where = {w[0]: index for index, w in held.items()}
    for wave, lane, rm, rn, reg in itertools.product(range(threads // 64), range(64), range(plan.repeats_M),
                                                     range(plan.repeats_N), range(plan.mfma.d_regs)):
        r = (rm * plan.repeats_N + rn) * plan.mfma.d_regs + reg
        assert where[(wave * 64 + lane, r)] == tuple(plan.acc_element(rm, rn, reg, wave, lane))


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_mfma_operand_is_where_the_mfma_reads(arch):
    for shape in get_arch(arch).mfma_shapes["bf16"]:
        for role, locate in (("A", mfma_layout.a_location), ("B", mfma_layout.b_location)):
            tile = (shape.M, shape.K) if role == "A" else (shape.K, shape.N)
            layout = MfmaOperand(tile, 64, role, shape.M, shape.k_per_lane, 1)
            held = _check_complete(layout, copies_per_element=1)
            for index, [(lane, r)] in held.items():
                want_lane, register, half = locate(shape, *_mfma_index(shape, index, role))
                assert (lane, r) == (want_lane, 2 * register + half)


def _mfma_index(shape, index, role):
    """The MFMA's own k index of real k (MfmaOperand's order: runs of 4 k spaced by 4*G, the accumulator's column
    order; for 4 k per lane it is k itself)."""
    x, k = index if role == "A" else index[::-1]
    G = 64 // shape.M
    kk = shape.k_per_lane * ((k // 4) % G) + 4 * (k // (4 * G)) + k % 4
    return (x, kk) if role == "A" else (kk, x)


def test_mfma_operand_replicates_over_the_other_waves():
    layout = MfmaOperand((64, 32), 256, "A", 16, 8, 2)  # 2 x 2 waves: A rows by wm, the same for both wn
    _check_complete(layout, copies_per_element=2)


@pytest.mark.parametrize("parent", [Blocked((64, 64), 256, 4), Blocked((4, 4096), 256, 4), Blocked((16, 8), 256, 1),
                                    Blocked((8, 4, 32), 128, 2),
                                    MfmaAccumulator((128, 128), 256, 16, 4, 2, 4, 4),
                                    MfmaAccumulator((64, 64), 256, 32, 16, 2, 1, 1)],
                         ids=lambda p: p.describe())
def test_slice_keeps_what_each_thread_held(parent):
    held = holders(parent)
    for dims in [(d,) for d in range(len(parent.shape))] + ([(0, 2)] if len(parent.shape) == 3 else []):
        layout = Slice(parent, dims)
        expected: dict = {}
        for index, where in held.items():
            kept = tuple(i for d, i in enumerate(index) if d not in dims)
            expected.setdefault(kept, set()).update(t for t, _ in where)
        got = _check_complete(layout)
        assert {k: {t for t, _ in w} for k, w in got.items()} == expected
        for index, where in held.items():  # a parent register maps to the slice register of its remaining index
            kept = tuple(i for d, i in enumerate(index) if d not in dims)
            assert all((t, layout.slice_register(r)) in got[kept] for t, r in where)


def test_slice_of_a_row_spread_over_several_slots_keeps_one_register_per_row():
    layout = Slice(Blocked((4, 4096), 256, 4), (1,))  # each thread holds 4 runs of every row
    assert layout.elems == 4
    assert register_of(layout, (2,)) == 2


def test_slice_keeping_the_reduced_dim_indexes_it_at_zero():
    layout = Slice(Blocked((32, 64), 128, 4), (1,), keepdims=True)
    assert layout.shape == (32, 1)
    _check_complete(layout)


def test_replicated_bits_are_the_thread_bits_holding_copies():
    assert replicated_bits(Blocked((64, 64), 256, 4)) == 0
    assert replicated_bits(Blocked((16,), 64, 1)) == 0b110000  # thread t holds element t % 16
    assert replicated_bits(Slice(Blocked((32, 64), 128, 4), (1,))) == 0b1111  # 16 threads share a row
