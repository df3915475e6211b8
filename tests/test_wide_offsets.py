"""Tile origins past 4 GiB and tiles whose per-lane offsets could wrap: never a stray access.

The V# math (64-bit base, NUM_RECORDS clamped without wrapping) is run on the emulator and compared
with Python's big integers; the tensors it describes are never mapped (the probe kernel only writes
its descriptors out), so the test needs no 4 GiB of memory.
"""
import pytest
import sympy
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.amdgcn import isa
from tilegcn.amdgcn.abi import WORKITEM_ID, KernelAbi
from tilegcn.amdgcn.arch import get_arch
from tilegcn.amdgcn.builder import KernelBuilder
from tilegcn.amdgcn.emit import render
from tilegcn.amdgcn.isa import Inst
from tilegcn.amdgcn.memory import GlobalAccess
from tilegcn.amdgcn.regalloc import allocate
from tilegcn.errors import CompileError
from tilegcn.ir import TensorSpec
from tilegcn.ir import types as ty
from tilegcn.compiler import lower, run_machine_passes
from tilegcn.passes.layout import TID
from tilegcn.runtime import emulator
from tilegcn.toolchain import assemble

GRID_Y = 4
HUGE = TensorSpec(ty.float32, (3, 1 << 20), (1 << 31, 1), True)  # 3 rows 8 GiB apart: ~16 GiB of view
SMALL = TensorSpec(ty.float32, (3, 1 << 20), (1 << 20, 1), True)  # 12 MiB: NUM_RECORDS's short form
POINTER = 0x7FFE_FFFF_F000  # near the top of the 48-bit space: the base's carry into bits 47:32 matters


def _probe(X, Out, n):
    with T.Kernel(1, GRID_Y, threads=64) as (bx, by):
        pass


def _descriptor_probe(offset_of, arch, spec):
    """A kernel writing, per workgroup row `by`, the four words of abi.resource(X, offset_of(by, n))."""
    kernel = T.trace(_probe, [spec, TensorSpec.of(torch.empty(GRID_Y, 4, dtype=torch.float32)), 0], {}, arch)
    x, out, n = kernel.params
    by = kernel.block_ids[1]
    b = KernelBuilder(get_arch(arch), kernel.name)
    abi = KernelAbi(b, kernel, TID)
    srd = abi.resource(x.buffer, offset_of(by, n.symbol))
    words = b.v.alloc(4, align=4)
    for i in range(4):
        b.emit("v_mov_b32", words[i], srd[i])
    dest = abi.resource(out.buffer, by * 16)
    b.emit("buffer_store_dwordx4", words, b.vgpr_constant(0), dest, 0, suffix="offen offset:0")
    b.emit("s_endpgm")
    insts, counts = allocate(b.insts, b)
    insts = run_machine_passes(insts, b.arch)
    return kernel, assemble(render(kernel, b.arch, abi, insts, 0, counts), arch)


OFFSETS = {  # name: (byte offset of (by, n), the int32 scalar n)
    "row stride, a power of two": (lambda by, n: by * (1 << 33), 0),
    "coefficient past 2^32": (lambda by, n: by * 0x1_2345_6789, 0),
    "product of a block id and a scalar": (lambda by, n: by * n * 0x2468_ACE1 + by * 5 + 12, 0x7654_3210),
    "past the end": (lambda by, n: by * (6 << 30) + n, 0x7654_3210),
    "negative scalar, before the start at by=0": (lambda by, n: by * (1 << 33) + n * 0x1_0000_0003, -3),
    "negative scalar times a block id": (lambda by, n: by * n * 6 + (1 << 34), -(1 << 31)),
    "up to the end of a small tensor": (lambda by, n: by * n * 0x4_0000 + 4, 12),
}


@pytest.mark.parametrize("arch,spec", [("gfx942", HUGE), ("gfx950", HUGE), ("gfx942", SMALL)],
                         ids=["gfx942-16GiB", "gfx950-16GiB", "gfx942-12MiB"])
@pytest.mark.parametrize("name", list(OFFSETS))
def test_descriptor_math_is_64_bit(name, arch, spec):
    offset_of, n = OFFSETS[name]
    kernel, hsaco = _descriptor_probe(offset_of, arch, spec)
    out = torch.zeros(GRID_Y, 4, dtype=torch.int32)
    emulator.load(hsaco).launch(kernel.name, grid=(1, GRID_Y, 1), block=(64, 1, 1), args=[POINTER, out, n])
    for by in range(GRID_Y):
        offset = int(sympy.sympify(offset_of(by, n)))
        base = (POINTER + offset) % (1 << 64)
        left = spec.nbytes - offset
        records = 0 if left < 0 or offset < 0 else min(left, 1 << 31)
        got = [w & 0xFFFFFFFF for w in out[by].tolist()]
        assert got[0] == base & 0xFFFFFFFF, (by, hex(got[0]), hex(base))
        assert got[1] == (base >> 32) & 0xFFFF, (by, hex(got[1]), hex(base))
        assert got[2] == records, (by, got[2], records)
        assert got[3] == get_arch(arch).raw_buffer_word3


@tilegcn.jit
def _copy_rows(X, Y, *, block_M=256, block_N=4, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        tile = T.alloc_fragment((block_M, block_N), X.dtype)
        T.copy(X[by * block_M, bx * block_N], tile)
        T.copy(tile, Y[by * block_M, bx * block_N])


def test_rows_past_a_strided_view_do_not_wrap_into_it():
    """Two rows 32 MiB apart in a 256-row tile: row 128 of the tile is 4 GiB past its origin, which a
    32-bit offset wraps to row 0. Rows past the view must neither read nor write anything."""
    stride = 1 << 23  # floats: 32 MiB
    x = torch.randn(2, 4)
    ys = torch.full((stride + 4,), 7.0)
    y = ys.as_strided((2, 4), (stride, 1))
    _copy_rows(x, y)
    assert torch.equal(y, x)
    untouched = torch.ones_like(ys, dtype=torch.bool)
    untouched[:4] = untouched[stride:] = False
    assert bool((ys[untouched] == 7.0).all())


def test_tile_that_32_bit_offsets_cannot_reach_is_refused():
    big = TensorSpec(ty.float32, (600, 4), (1 << 22, 1), True)  # ~9.4 GiB view, 16 MiB per row
    kernel = T.trace(_copy_rows.fn, [big, big], dict(block_M=256, block_N=4, threads=256), "gfx942")
    with pytest.raises(CompileError, match="32-bit buffer offsets cannot reach"):
        lower(kernel, "gfx942")


# ---- addresses formed inside a loop: the V# built once before it, the loop advancing soffset / voffset ----------
STEPS = 6


def _loop_probe(arch, spec, index_of, mask_dims):
    """A kernel whose loop `for k in range(STEPS)` forms, as a load in the loop would (GlobalAccess.address), the
    operands that access X[index_of(k, lane)] and writes them per step and lane: the V#'s words, soffset, voffset
    and the immediate offset. X itself is never accessed."""
    out_spec = TensorSpec.of(torch.empty(STEPS, 64, 8, dtype=torch.float32))  # launched with int32 words
    kernel = T.trace(_probe, [spec, out_spec, 0], {}, arch)
    x, out, _ = kernel.params
    b = KernelBuilder(get_arch(arch), kernel.name)
    abi = KernelAbi(b, kernel, TID)
    access = GlobalAccess(abi)
    dest = abi.resource(out.buffer, 0)
    row_bytes = b.v.alloc()
    b.emit("v_lshlrev_b32", row_bytes, 5, WORKITEM_ID)
    k = sympy.Symbol("k", integer=True, nonnegative=True)
    counter = b.s.alloc()
    b.emit("s_mov_b32", counter, 0)
    access.loop_ranges[k] = (0, STEPS - 1)
    with b.loop_frame(k, counter) as frame:
        frame.insts.append(Inst(".Lprobe", kind=isa.LABEL))
        a = access.address(x.buffer, index_of(k, TID), mask_dims, 4)
        words = b.v.alloc(8, align=4)
        for i, value in enumerate([a.srd[0], a.srd[1], a.srd[2], a.srd[3], a.soffset, a.voffset, a.imm, 0]):
            b.emit("v_mov_b32", words[i], value)
        step_bytes, voff = b.s.alloc(), b.v.alloc()
        b.emit("s_lshl_b32", step_bytes, counter, 11)  # 64 lanes x 32 bytes per step
        b.emit("v_add_u32", voff, step_bytes, row_bytes)
        b.emit("buffer_store_dwordx4", words[0:4], voff, dest, 0, suffix="offen offset:0")
        b.emit("buffer_store_dwordx4", words[4:8], voff, dest, 0, suffix="offen offset:16")
        b.emit("s_add_u32", counter, counter, 1)
        b.emit("s_cmp_lt_u32", counter, STEPS, defs=(), uses=(counter,))
        b.emit("s_cbranch_scc1", ".Lprobe")
    b.frames[-1].insts.extend(frame.insts)
    b.emit("s_endpgm")
    insts, counts = allocate(b.insts, b)
    insts = run_machine_passes(insts, b.arch)
    return kernel, assemble(render(kernel, b.arch, abi, insts, 0, counts), arch)


LOOP_WALKS = {  # name: (tensor, index of (loop variable, lane), masked dims)
    "rows 16 MiB apart, walked past 4 GiB": (
        TensorSpec(ty.float32, (STEPS * 64, 4), (1 << 22, 1), True), lambda k, t: (64 * k + t, 1), []),
    "rows 4 MiB apart, ragged, walked 1.25 GiB": (
        TensorSpec(ty.float32, (STEPS * 64 - 20, 4), (1 << 20, 1), True), lambda k, t: (64 * k + t, 3), []),
    "rows 4 KiB apart, every row inside": (
        TensorSpec(ty.float32, (STEPS * 64, 1024), (1024, 1), True), lambda k, t: (64 * k + t, 5), []),
    "ragged columns walked, ragged rows": (
        TensorSpec(ty.float32, (50, 300), (300, 1), True), lambda k, t: (t, 64 * k + 7), [1]),
    "one row of 4 GiB, walked 256 MiB a step": (
        TensorSpec(ty.float32, (1, 1 << 30), (1 << 30, 1), True), lambda k, t: (0, (1 << 26) * k + 4 * t), [1]),
    "one row of 4 GiB, walked 1 GiB a step": (
        TensorSpec(ty.float32, (1, 1 << 30), (1 << 30, 1), True), lambda k, t: (0, (1 << 28) * k + 4 * t), [1]),
}


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("name", list(LOOP_WALKS))
def test_loop_addresses_reach_every_step_exactly(name, arch):
    """Every step of the loop reaches exactly the element it names (64-bit base + soffset + voffset + offset:,
    as the hardware adds them), and an element is in range of NUM_RECORDS, under either reading of whether
    soffset counts in the range check, iff it lies inside the tensor: tiles far from the first are neither
    wrapped nor cut off by the 32-bit NUM_RECORDS."""
    spec, index_of, mask_dims = LOOP_WALKS[name]
    kernel, hsaco = _loop_probe(arch, spec, index_of, mask_dims)
    out = torch.zeros(STEPS, 64, 8, dtype=torch.int32)
    emulator.load(hsaco).launch(kernel.name, grid=(1, 1, 1), block=(64, 1, 1), args=[POINTER, out, 0])
    words = out.to(torch.int64) & 0xFFFFFFFF
    for k in range(STEPS):
        for lane in range(64):
            base, high, records, _, soffset, voffset, imm, _ = words[k, lane].tolist()
            index = index_of(k, lane)
            inside = all(0 <= i < n for i, n in zip(index, spec.shape))
            checked = {voffset + imm + 4 <= records, voffset + imm + soffset + 4 <= records}
            assert checked == {inside}, (k, lane, index, hex(voffset), hex(soffset), hex(records))
            if inside:
                address = (base | high << 32) + soffset + voffset + imm
                element = POINTER + 4 * sum(i * st for i, st in zip(index, spec.strides))
                assert address == element, (k, lane, index, hex(address), hex(element))
