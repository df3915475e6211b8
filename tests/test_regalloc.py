"""Register allocation (tilegcn/amdgcn/regalloc.py, liveness.py) on hand-built instruction lists with virtual
registers: values live across a loop keep their registers through the whole loop, values with disjoint lives
share one, tuples get the alignment the assembler demands (llvm-mc is the oracle), and a kernel over the register
file is a ResourceError naming needed vs available. The emulator runs the allocated kernels and judges the
answer against torch; the GEMM and elementwise suites are the large-scale check."""
from __future__ import annotations

import copy
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "asm"))
import emukit  # noqa: E402

from tilegcn.amdgcn import isa  # noqa: E402
from tilegcn.amdgcn.arch import get_arch  # noqa: E402
from tilegcn.amdgcn.builder import KernelBuilder  # noqa: E402
from tilegcn.amdgcn.isa import Reg  # noqa: E402
from tilegcn.amdgcn.regalloc import allocate  # noqa: E402
from tilegcn.compiler import run_machine_passes  # noqa: E402
from tilegcn.errors import ResourceError  # noqa: E402
from tilegcn.toolchain import find_llvm  # noqa: E402

KERNARG = Reg("s", 0, 2)
TID = Reg("v", 0)
TRIPS = 3


def builder(arch="gfx942") -> KernelBuilder:
    b = KernelBuilder(get_arch(arch), "k")
    b.s.reserve(3)  # kernarg pointer, workgroup id x
    b.v.reserve(1)  # work-item id
    return b


def resource(b, offset: int) -> Reg:
    """A raw V# over the tensor whose pointer is kernel argument `offset` (bytes)."""
    ptr, srd = b.s.alloc(2, align=2), b.s.alloc(4, align=4)
    b.emit("s_load_dwordx2", ptr, KERNARG, offset)
    b.emit("s_mov_b32", srd[0], ptr[0])
    b.emit("s_and_b32", srd[1], ptr[1], 0xFFFF)
    b.emit("s_mov_b32", srd[2], 0x7FFFFFFF)
    b.emit("s_mov_b32", srd[3], b.arch.raw_buffer_word3)
    return srd


def loop_kernel(arch: str) -> tuple:
    """Y[lane] = sum over TRIPS iterations of (prev + x + 1 + 2), x = X[lane], prev = 1 on the first trip and 2x
    after it. x is defined before the loop and read at its top; prev is read at the top and redefined later in
    the body (carried over the back-edge); t1, t2 are born and die in the body after both."""
    b = builder(arch)
    src, dst = resource(b, 0), resource(b, 8)
    voff, x, acc, prev, t1, t2 = (b.v.alloc(what=n) for n in ("voff", "x", "acc", "prev", "t1", "t2"))
    count = b.s.alloc(what="trip count")
    b.emit("v_lshlrev_b32", voff, 2, TID)
    b.emit("buffer_load_dword", x, voff, src, 0, suffix="offen")
    b.emit("v_mov_b32", acc, 0)
    b.emit("v_mov_b32", prev, 1.0)
    b.emit("s_mov_b32", count, 0)
    b.insts.append(isa.Inst(".Lloop", kind=isa.LABEL))
    b.emit("v_add_f32", acc, acc, prev)
    b.emit("v_add_f32", acc, acc, x)
    b.emit("v_add_f32", prev, x, x)
    b.emit("v_mov_b32", t1, 1.0)
    b.emit("v_mov_b32", t2, 2.0)
    b.emit("v_add_f32", t1, t1, t2)
    b.emit("v_add_f32", acc, acc, t1)
    b.emit("s_add_u32", count, count, 1)
    b.emit("s_cmp_lt_u32", count, TRIPS)
    b.emit("s_cbranch_scc1", ".Lloop")
    b.emit("buffer_store_dword", acc, voff, dst, 0, suffix="offen")
    b.emit("s_endpgm")
    return b, dict(x=x, prev=prev, t1=t1, t2=t2, acc=acc)


def physical(insts: list, b, virtual: Reg) -> Reg:
    """Where the allocation put `virtual`: the register at the same operand position of its first instruction."""
    for before, after in zip(b.insts, insts):
        for o, p in zip(before.operands, after.operands):
            if o == virtual:
                return p
    raise AssertionError(f"{virtual} appears nowhere")


def run(insts, counts, arch, x):
    body = "\n".join(i.text() for i in run_machine_passes(insts, arch))  # waits, then hazard nops
    mod = emukit.module(body, arch=arch, args=("ptr", "ptr"), vgprs=counts["next_free_vgpr"], sgprs=counts["sgprs"],
                         accum=counts["accum_offset"])
    y = torch.zeros(64)
    mod.launch("k", grid=(1, 1, 1), block=(64, 1, 1), args=[x, y])
    return y


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_values_live_across_the_back_edge_keep_their_registers(arch):
    b, regs = loop_kernel(arch)
    insts, counts = allocate(b.insts, b)
    where = {name: physical(insts, b, r) for name, r in regs.items()}
    assert not any(r.virtual for i in insts for r in (*i.defs, *i.uses))
    # the loop's temporaries die inside it: they may not take x's or prev's registers, nor the accumulator's
    assert {where["t1"], where["t2"]}.isdisjoint({where["x"], where["prev"], where["acc"]})
    x = torch.randint(-8, 8, (64,)).float()
    expected = (TRIPS * (x + 3) + 1 + (TRIPS - 1) * 2 * x)
    assert torch.equal(run(insts, counts, arch, x), expected)


def test_disjoint_lives_share_a_register_and_counts_are_the_peak():
    b = builder()
    a, c, out = b.v.alloc(what="a"), b.v.alloc(what="c"), b.v.alloc(what="out")
    b.emit("v_mov_b32", a, 1.0)
    b.emit("v_add_f32", out, a, a)  # a's last use
    b.emit("v_mov_b32", c, 2.0)  # c is born after a died
    b.emit("v_add_f32", out, out, c)
    b.emit("s_endpgm")
    insts, counts = allocate(b.insts, b)
    assert physical(insts, b, a) == physical(insts, b, c)
    assert physical(insts, b, out) != physical(insts, b, a)
    assert counts["vgprs"] == 3  # v0 (work-item id) and two registers


def test_a_value_born_where_another_dies_does_not_take_its_register():
    """Closed intervals: an MFMA result may not overlap its sources, so no group starts in a dying one."""
    b = builder()
    a, c = b.v.alloc(2, align=2), b.a.alloc(4, align=4)
    b.emit("v_mov_b32", a[0], 0)
    b.emit("v_mov_b32", a[1], 0)
    v = b.v.alloc(4, align=4)
    b.emit("v_mfma_f32_16x16x16_bf16", v, a, a, 0, defs=(v,), uses=(a,))  # noqa: E501  (a's last use)
    b.emit("v_accvgpr_write_b32", c[0], v[0])
    b.emit("s_endpgm")
    insts, _ = allocate(b.insts, b)
    pa, pv = physical(insts, b, a), physical(insts, b, v)
    assert set(pa.units()).isdisjoint(pv.units())


ALIGN_PROGRAM = ("s_load_dwordx4 {s4}, s[0:1], 0", "s_load_dwordx2 {s2}, s[0:1], 16",
                 "buffer_load_dword {v1}, v0, {s4}, 0 offen", "ds_read_b128 {v4}, {v1}", "ds_read_b64 {v2}, {v1}",
                 "v_lshlrev_b64 {v2}, 1, {v2}", "v_mfma_f32_16x16x16_bf16 {a4}, {v2}, {v2}, {a4}",
                 "s_and_saveexec_b64 {s2}, vcc")
FIXED = {"vcc": isa.VCC, "v0": TID, "s[0:1]": KERNARG}


def emit_line(b, line: str, regs: dict):
    """Emit one ALIGN_PROGRAM line with its {name} operands replaced by the virtual groups in `regs`."""
    op, _, rest = line.partition(" ")
    operands, _, suffix = rest.partition(" offen")
    b.emit(op, *[regs[o[1:-1]] if o.startswith("{") else FIXED.get(o, o) for o in operands.split(", ")],
           suffix="offen" if _ else "")


def llvm_mc_errors(lines: list, arch: str) -> str:
    mc = find_llvm(arch).tool("llvm-mc")
    done = subprocess.run([mc, "-arch=amdgcn", f"-mcpu={arch}", "-filetype=null"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True)
    return done.stderr


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_tuples_are_aligned_as_the_assembler_demands(arch):
    """Groups asked for with align=1 still get the ISA's tuple alignment: llvm-mc accepts every operand, and
    rejects the same program with each tuple moved one register up (so it does check)."""
    b = builder(arch)
    for _ in range(3):  # odd fillers in every file, live throughout, so nothing lands aligned by luck
        for file in (b.v, b.s, b.a):
            r = file.alloc()
            b.emit("v_mov_b32" if file is b.v else "s_mov_b32" if file is b.s else "v_accvgpr_write_b32", r, 0)
    fillers = [i.defs[0] for i in b.insts]
    regs = dict(v1=b.v.alloc(), v2=b.v.alloc(2), v4=b.v.alloc(4), a4=b.a.alloc(4), s2=b.s.alloc(2), s4=b.s.alloc(4))
    for line in ALIGN_PROGRAM:
        emit_line(b, line, regs)
    b.emit("s_nop", 0, uses=tuple(fillers))
    insts, _ = allocate(b.insts, b)
    where = {name: physical(insts, b, r) for name, r in regs.items()}
    text = [i.text().strip() for i in insts]
    assert llvm_mc_errors(text, arch) == ""
    for name in ("v2", "v4", "a4", "s2", "s4"):
        moved = {**where, name: Reg(where[name].file, where[name].index + 1, where[name].count)}
        errors = llvm_mc_errors([line.format(**moved) for line in ALIGN_PROGRAM], arch)
        assert "invalid" in errors, (name, errors)


@pytest.mark.parametrize("file, what", [("v", "VGPRs"), ("a", "AGPRs"), ("s", "SGPRs")])
def test_over_the_register_file_names_needed_available_and_holders(file, what):
    b = builder("gfx950")
    pool = {"v": b.v, "a": b.a, "s": b.s}[file]
    size = {"v": 256, "a": 256, "s": 102}[file]
    big = pool.alloc(size - 10, what="big tile")
    other = pool.alloc(12, what="other tile")
    op = {"v": "v_mov_b32", "a": "v_accvgpr_write_b32", "s": "s_mov_b32"}[file]
    b.emit(op, big[0], 0)
    b.emit(op, other[0], 0)
    b.emit("s_nop", 0, uses=(big, other))  # both live here
    with pytest.raises(ResourceError, match=rf"needs \d+ {what}.*, gfx950 has {size} .*big tile: {size - 10}") as e:
        allocate(b.insts, b)
    assert int(re.search(r"needs (\d+)", str(e.value)).group(1)) >= size + 2  # both tiles, after the ABI registers
    b.insts.pop()  # `big` dies before `other` is born: they fit
    b.insts.pop()
    b.emit("s_nop", 0, uses=(other,))
    allocate(b.insts, b)


def test_a_register_is_one_immutable_object_per_value():
    """The passes compare and hash registers by identity (Reg is interned): equal fields must give the same
    object however the register was made (constructor, slicing, pickling, copying), and it cannot be changed."""
    r = Reg("v", 4, 2, virtual=True)
    assert r is Reg("v", 4, 2, True) and r == Reg("v", 4, 2, True)
    assert r != Reg("v", 4, 2) and r != Reg("v", 4, 1, True) and r != Reg("s", 4, 2, True)
    assert r[1] is Reg("v", 5, 1, True) and r[0:2] is r
    assert pickle.loads(pickle.dumps(r)) is r and copy.deepcopy(r) is r and copy.copy(r) is r
    assert {r: "x"}[Reg("v", 4, 2, True)] == "x"
    assert str(r) == "%v[4:5]" and Reg("vcc", 0, 2).text == "vcc"
    with pytest.raises(AttributeError):
        r.index = 6
    assert r.index == 4


def test_with_threads_the_counts_are_checked_against_the_workgroup():
    """allocate(..., threads) refuses an allocation whose unified register count leaves no room for a workgroup of
    that many threads (the driver then tries the emitted order), and gives what allocate without it gives when it
    fits."""
    b = builder("gfx942")
    vals, acc = b.v.alloc(200, what="tile"), b.a.alloc(100, what="accumulators")
    b.emit("v_mov_b32", vals[0], 0)
    b.emit("v_accvgpr_write_b32", acc[0], 0)
    b.emit("s_nop", 0, uses=(vals, acc))
    b.emit("s_endpgm")
    with pytest.raises(ResourceError, match=r"512 threads are 8 waves, 2 on each .* leaves 256 per wave on gfx942"):
        allocate(b.insts, b, threads=512)  # 200 VGPRs (from 208) + 100 AGPRs > 256
    insts, counts = allocate(b.insts, b, threads=256)
    assert counts == allocate(b.insts, b)[1] and counts["next_free_vgpr"] > 256
    assert [i.text() for i in insts] == [i.text() for i in allocate(b.insts, b)[0]]


def staged_loop_kernel(variant: str) -> tuple:
    """The register shape of a K loop pipelined over two stages: `s0` (4 VGPRs) is filled before the loop, read
    at its top (copied on, here into acc) and refilled later in the body, so it lives around the loop; `s1` is
    filled and read in between, where s0 holds nothing. Y[lane] = TRIPS x (4 s0 + 8 x) with s0 = 1 on the first
    trip and x + 1 after it. Variants: "full" (s1 lies in s0's dead span), "partial" (s0[3] is read again after
    s0[0:3] were refilled: its old value is still needed, no dead span), "outlives" (s1 is read after s0's
    refill), "exec" (as "full" in a kernel that writes EXEC: a refill under a partial EXEC would keep the other
    lanes' old values, so no dead span is trusted)."""
    b = builder("gfx942")
    src, dst = resource(b, 0), resource(b, 8)
    voff, x, acc = (b.v.alloc(what=n) for n in ("voff", "x", "acc"))
    s0 = b.v.alloc(4, align=4, what="stage 0")
    count = b.s.alloc(what="trip count")
    b.emit("v_lshlrev_b32", voff, 2, TID)
    b.emit("buffer_load_dword", x, voff, src, 0, suffix="offen")
    for r in range(4):
        b.emit("v_mov_b32", s0[r], 1.0)
    b.emit("v_mov_b32", acc, 0)
    b.emit("s_mov_b32", count, 0)
    if variant == "exec":
        b.emit("s_mov_b64", isa.EXEC, -1)  # every lane on, as before: the values do not change
    b.insts.append(isa.Inst(".Lloop", kind=isa.LABEL))
    for r in range(4):
        b.emit("v_add_f32", acc, acc, s0[r])
    s1 = b.v.alloc(4, align=4, what="stage 1")
    for r in range(4):
        b.emit("v_add_f32", s1[r], x, x)
    if variant != "outlives":
        for r in range(4):
            b.emit("v_add_f32", acc, acc, s1[r])
    for r in range(3):
        b.emit("v_add_f32", s0[r], 1.0, x)
    if variant == "partial":  # the old s0[3] read once more (added and taken away: the sum stays)
        b.emit("v_add_f32", acc, acc, s0[3])
        b.emit("v_sub_f32", acc, acc, s0[3])
    b.emit("v_add_f32", s0[3], 1.0, x)
    if variant == "outlives":
        for r in range(4):
            b.emit("v_add_f32", acc, acc, s1[r])
    b.emit("s_add_u32", count, count, 1)
    b.emit("s_cmp_lt_u32", count, TRIPS)
    b.emit("s_cbranch_scc1", ".Lloop")
    b.emit("buffer_store_dword", acc, voff, dst, 0, suffix="offen")
    b.emit("s_endpgm")
    return b, s0, s1


@pytest.mark.parametrize("variant", ["full", "partial", "outlives", "exec"])
def test_a_loop_carried_group_lends_its_registers_where_it_is_dead(variant):
    """Lifetime holes (liveness.py): with holes=True the stage read at the loop's top lends its registers to the
    other stage between its last read and its refill, and only there; the emulator checks the values."""
    b, s0, s1 = staged_loop_kernel(variant)
    plain_insts, plain = allocate(b.insts, b)
    insts, counts = allocate(b.insts, b, holes=True)
    units = lambda allocated, group: {u for r in range(4) for u in physical(allocated, b, group[r]).units()}  # noqa: E731
    shared = units(insts, s0) & units(insts, s1)
    assert units(plain_insts, s0).isdisjoint(units(plain_insts, s1))
    if variant == "full":
        assert shared and counts["vgprs"] == plain["vgprs"] - 4
    else:
        assert not shared and counts == plain
    x = torch.randint(-8, 8, (64,)).float()
    expected = 4 + 8 * x + (TRIPS - 1) * (4 * (x + 1) + 8 * x)
    for allocated, c in ((insts, counts), (plain_insts, plain)):
        assert torch.equal(run(allocated, c, "gfx942", x), expected)
