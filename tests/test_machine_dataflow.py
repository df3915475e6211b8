"""The wait-count and hazard passes as dataflow over the control-flow graph (tilegcn/amdgcn/cfg.py), on hand-built
loops whose values cross the back-edge. The emulator is the judge: the pass's output runs clean on it, and
removing any wait or one wait state the pass chose is refused there (HazardError), so the counts are both
sufficient and necessary."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "asm"))
import emukit  # noqa: E402

from tilegcn.amdgcn import cfg, isa  # noqa: E402
from tilegcn.amdgcn.arch import get_arch  # noqa: E402
from tilegcn.amdgcn.builder import KernelBuilder  # noqa: E402
from tilegcn.amdgcn.isa import Reg  # noqa: E402
from tilegcn.amdgcn.waitcnt import insert_waits, lds_tag  # noqa: E402
from tilegcn.compiler import run_machine_passes  # noqa: E402
from tilegcn.errors import HazardError  # noqa: E402

N_ITER = 3


def v(i, n=1):
    return Reg("v", i, n)


def s(i, n=1):
    return Reg("s", i, n)


def a(i, n=1):
    return Reg("a", i, n)


def _preamble(b):
    b.emit("s_load_dwordx2", s(4, 2), s(0, 2), 0)
    b.emit("s_load_dwordx2", s(6, 2), s(0, 2), 8)
    b.emit("v_and_b32", v(1), 0x3FF, v(0))
    b.emit("v_lshlrev_b32", v(2), 2, v(1))
    for dst, ptr in ((8, 4), (12, 6)):
        b.emit("s_mov_b32", s(dst), s(ptr))
        b.emit("s_and_b32", s(dst + 1), s(ptr + 1), 0xFFFF)
        b.emit("s_mov_b32", s(dst + 2), 0x7FFFFFFF)
        b.emit("s_mov_b32", s(dst + 3), 0x20000)


def _loop_tail(b, label):
    b.emit("s_add_u32", s(17), s(17), 1)
    b.emit("s_cmp_lt_u32", s(17), N_ITER, defs=(), uses=(s(17),))
    b.emit("s_cbranch_scc1", label)


def two_stream_loop(arch):
    """Rows 2i and 2i+1 of X are loaded in iteration i-1 (the preheader for i = 0) and summed in iteration i;
    Y = the sum of all 2*N_ITER + 2 rows (one row: 64 floats, one per lane)."""
    b = KernelBuilder(get_arch(arch), "k")
    _preamble(b)
    b.emit("v_mov_b32", v(5), 0)
    b.emit("v_mov_b32", v(6), 0)
    b.emit("s_mov_b32", s(16), 0)
    b.emit("s_mov_b32", s(17), 0)
    b.emit("buffer_load_dword", v(3), v(2), s(8, 4), s(16), suffix="offen")
    b.emit("buffer_load_dword", v(4), v(2), s(8, 4), s(16), suffix="offen offset:256")
    b.insts.append(isa.Inst(".Lloop", kind=isa.LABEL))
    b.emit("s_add_u32", s(16), s(16), 512)
    b.emit("v_add_f32", v(5), v(5), v(3))  # row 2i: one younger load (row 2i+1) may stay in flight
    b.emit("buffer_load_dword", v(3), v(2), s(8, 4), s(16), suffix="offen")
    b.emit("v_add_f32", v(6), v(6), v(4))  # row 2i+1: the load just issued may stay in flight
    b.emit("buffer_load_dword", v(4), v(2), s(8, 4), s(16), suffix="offen offset:256")
    _loop_tail(b, ".Lloop")
    b.emit("v_add_f32", v(5), v(5), v(3))
    b.emit("v_add_f32", v(6), v(6), v(4))
    b.emit("v_add_f32", v(5), v(5), v(6))
    b.emit("buffer_store_dword", v(5), v(2), s(12, 4), 0, suffix="offen")
    b.emit("s_endpgm")
    return b.insts


def run(insts, arch, x, y, accum=None):
    body = "\n".join(i.text() for i in insts)
    vgprs = 16 + (16 if accum else 0)
    mod = emukit.module(body, arch=arch, args=("ptr", "ptr"), vgprs=vgprs, sgprs=24, accum=accum)
    mod.launch("k", grid=(1, 1, 1), block=(64, 1, 1), args=[x, y])


def loop_span(insts):
    start = next(i for i, x in enumerate(insts) if x.kind == isa.LABEL)
    end = next(i for i, x in enumerate(insts) if x.kind == isa.BRANCH)
    return start, end


def test_blocks_and_back_edge():
    insts = two_stream_loop("gfx942")
    blks = cfg.blocks(insts)
    assert [b.label for b in blks] == [None, ".Lloop", None]
    assert blks[0].succs == [1] and blks[1].succs == [1, 2] and blks[2].succs == []
    assert sum(len(b.insts) for b in blks) == len(insts)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_load_issued_in_one_iteration_is_waited_for_exactly_in_the_next(arch):
    out = insert_waits(two_stream_loop(arch), get_arch(arch))
    start, end = loop_span(out)
    loop_waits = [i.operands[0] for i in out[start:end] if i.kind == isa.WAIT]
    assert loop_waits == ["vmcnt(1)", "vmcnt(1)"]  # never a drain inside the loop
    assert out[start - 1].kind != isa.WAIT  # nothing flushed at the label

    x = torch.randint(-8, 8, (2 * N_ITER + 2, 64)).float()
    y = torch.zeros(64)
    run(out, arch, x, y)
    assert torch.equal(y, x.sum(0))

    for k, inst in enumerate(out):  # every wait the pass chose is needed
        if inst.kind == isa.WAIT:
            with pytest.raises(HazardError):
                run(out[:k] + out[k + 1:], arch, x.clone(), torch.zeros(64))


def test_barrier_waits_for_published_lds_regions_only():
    """A tagged LDS write nobody publishes (the next pipeline stage) stays in flight across s_barrier."""
    b = KernelBuilder(get_arch("gfx950"), "k")
    b.emit("s_mov_b32", Reg("m0", 0), 0)
    b.emit("buffer_load_dwordx4", v(2), s(8, 4), 0, suffix="offen lds", defs=(lds_tag(0),), uses=(v(2), s(8, 4)))
    b.emit("buffer_load_dwordx4", v(2), s(8, 4), 0, suffix="offen lds", defs=(lds_tag(1),), uses=(v(2), s(8, 4)))
    b.emit("s_barrier", uses=(lds_tag(0),))
    b.emit("s_barrier")  # untagged: publishes untagged writes only
    b.emit("s_barrier", uses=(lds_tag(1),))
    out = [i.text().strip() for i in insert_waits(b.insts, get_arch("gfx950")) if i.kind in (isa.WAIT, isa.BARRIER)]
    assert out == ["s_waitcnt vmcnt(1)", "s_barrier", "s_barrier", "s_waitcnt vmcnt(0)", "s_barrier"]


def mfma_loop(arch):
    """An MFMA at the end of each iteration, its result read at the start of the next (v_accvgpr_read)."""
    b = KernelBuilder(get_arch(arch), "k")
    _preamble(b)
    for r in range(16):
        b.emit("v_accvgpr_write_b32", a(r), 0)
    b.emit("v_mov_b32", v(8), 0x3F803F80)  # bf16 pairs (1, 1)
    b.emit("v_mov_b32", v(9), 0x3F803F80)
    b.emit("v_mov_b32", v(5), 0)
    b.emit("s_mov_b32", s(17), 0)
    b.insts.append(isa.Inst(".Lloop", kind=isa.LABEL))
    b.emit("v_accvgpr_read_b32", v(7), a(0))
    b.emit("v_add_f32", v(5), v(5), v(7))
    b.emit("v_mfma_f32_32x32x8_bf16", a(0, 16), v(8, 2), v(8, 2), a(0, 16), defs=(a(0, 16),),
           uses=(v(8, 2), v(8, 2), a(0, 16)))
    _loop_tail(b, ".Lloop")
    b.emit("buffer_store_dword", v(5), v(2), s(12, 4), 0, suffix="offen")
    b.emit("s_endpgm")
    return b.insts


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_mfma_hazard_across_the_back_edge(arch):
    arch_t = get_arch(arch)
    out = run_machine_passes(mfma_loop(arch), arch)
    start, _ = loop_span(out)
    read = next(i for i in range(start, len(out)) if out[i].op == "v_accvgpr_read_b32")
    states = sum(int(i.operands[0]) + 1 for i in out[start:read] if i.op == "s_nop")
    # tail of the previous iteration: s_add, s_cmp, s_cbranch count one wait state each
    assert states == arch_t.mfma_hazards.vdst_to_read[8] - 3

    x, y = torch.zeros(64), torch.zeros(64)
    run(out, arch, x, y, accum=16)
    assert torch.equal(y, torch.full((64,), 8.0 * (0 + 1 + 2)))  # a0 after i MFMAs: 8 * i (K = 8 ones)

    first_nop = next(i for i in range(start, read) if out[i].op == "s_nop")
    short = out[:first_nop] + [isa.Inst("s_nop", (int(out[first_nop].operands[0]) - 1,), kind=isa.SOPP)] \
        if int(out[first_nop].operands[0]) > 0 else out[:first_nop]
    with pytest.raises(HazardError):
        run(short + out[first_nop + 1:], arch, x, torch.zeros(64), accum=16)
