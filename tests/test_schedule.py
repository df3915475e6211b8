"""The list scheduler (tilegcn/amdgcn/schedule.py) on hand-built blocks, the `schedule=` compile option, and the
wait a barrier needs once the scheduler lets LDS reads be in flight across it (judged by the emulator)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "asm"))
import emukit  # noqa: E402

import kernels  # noqa: E402
import tilegcn  # noqa: E402
from tilegcn.amdgcn import isa  # noqa: E402
from tilegcn.amdgcn.arch import get_arch  # noqa: E402
from tilegcn.amdgcn.builder import KernelBuilder  # noqa: E402
from tilegcn.amdgcn.isa import EXEC, VCC, Reg  # noqa: E402
from tilegcn.amdgcn.schedule import schedule  # noqa: E402
from tilegcn.amdgcn.waitcnt import insert_waits, lds_tag  # noqa: E402
from tilegcn.errors import ArgumentError, RaceError  # noqa: E402

ARCH = get_arch("gfx950")
MFMA = "v_mfma_f32_32x32x16_bf16"  # 8 passes: 7 other instructions issue under it


def v(i, n=1):
    return Reg("v", i, n)


def s(i, n=1):
    return Reg("s", i, n)


def builder():
    """A loop body (the scheduler's domain: a block that branches back to its own label) to fill."""
    b = KernelBuilder(ARCH, "k")
    b.insts.append(isa.Inst(".Lloop", kind=isa.LABEL))
    return b


def mfma(b, acc: int, src: int = 0):
    d = Reg("a", 16 * acc, 16)
    return b.emit(MFMA, d, v(src, 4), v(src + 4, 4), d, defs=(d,), uses=(v(src, 4), v(src + 4, 4), d))


def ds_read(b, dst: int, offset: int = 0):
    return b.emit("ds_read_b128", v(dst, 4), v(100), suffix=f"offset:{offset}")


def scheduled(b) -> list:
    b.emit("s_cbranch_scc1", ".Lloop")
    b.emit("s_endpgm")
    out = schedule(b.insts, ARCH)
    assert sorted(map(id, out)) == sorted(map(id, b.insts)), "the scheduler must permute, never add or drop"
    assert out[0].kind == isa.LABEL and out[-2].kind == isa.BRANCH  # the block's ends stay in place
    return out


def position(out, inst) -> int:
    return next(i for i, x in enumerate(out) if x is inst)


def test_independent_reads_fill_the_gaps_between_back_to_back_mfmas():
    b = builder()
    mfmas = [mfma(b, acc) for acc in range(8)]
    reads = [ds_read(b, 20 + 4 * r, 16 * r) for r in range(8)]  # the next group's fragments
    out = scheduled(b)
    kinds = [x.kind for x in out[1:-2]]
    first, last = position(out, mfmas[0]), position(out, mfmas[-1])
    assert all(first < position(out, r) < last for r in reads)  # issued under the MFMAs, not after them
    gaps = "".join("m" if k == isa.MFMA else "." for k in kinds).strip(".").split("m")
    assert max(map(len, gaps)) <= 7  # never more than an 8-pass MFMA hides
    assert schedule(b.insts, ARCH, interleave=False) == b.insts  # plain: source order


def test_a_dependent_pair_never_swaps():
    b = builder()
    war = mfma(b, 4, src=40)  # reads v[40:47] ...
    independent = [mfma(b, acc) for acc in range(4)]
    load = ds_read(b, 40)  # ... which this overwrites: it must wait for the MFMA (write after read)
    use = mfma(b, 5, src=40)  # reads the loaded v[40:43] (read after write)
    waw = b.emit("v_mov_b32", v(40), 0)  # overwrites it again (write after read and after write)
    out = scheduled(b)
    assert position(out, war) < position(out, load) < position(out, use) < position(out, waw)
    assert position(out, load) < position(out, independent[-1])  # it did move up, past independent MFMAs


def test_a_write_inside_a_tuple_waits_for_the_tuples_reader():
    """The scheduler keys its dependencies by register classes (isa.unit_keys): a write to one register in the
    middle of a tuple others read whole must still order against them (here neither end of the tuple)."""
    b = builder()
    ds_read(b, 40)  # the reader waits for this load's latency: the MFMAs below issue first
    reader = mfma(b, 4, src=40)  # reads v[40:43] and v[44:47]
    independent = [mfma(b, acc) for acc in range(4)]
    middle = b.emit("v_mov_b32", v(42), 0)  # overwrites the third register of the first source
    after = b.emit("v_add_u32", v(45), v(46), v(47))  # inside the second source, reading two of its registers
    mfma(b, 5, src=40)  # reads both writes (VALU work no MFMA waits for would go last: _deferred)
    out = scheduled(b)
    assert position(out, reader) < position(out, middle)
    assert position(out, reader) < position(out, after)
    assert position(out, middle) < position(out, independent[-1])  # it did move up: only the reader holds it


def test_packed_f32_ops_issue_where_no_mfma_holds_them():
    """A packed-f32 VALU op (v_pk_mul_f32: the flash attention rescale) waits passes + 2 slots behind an MFMA of its
    SIMD (S33, arch.mfma_valu_holds; the timing model holds it as long): the scheduler issues them where the
    matrix pipe is idle (here after the MFMAs), never in an MFMA's shadow, where plain VALU ops fill the gaps
    though they come later in program order."""
    b = builder()
    mfmas = [mfma(b, acc) for acc in range(4)]
    packed = [b.emit("v_pk_mul_f32", v(60 + 2 * i, 2), v(60 + 2 * i, 2), v(80, 2)) for i in range(6)]
    plain = [b.emit("v_mul_f32", v(90 + i), v(90 + i), v(81)) for i in range(6)]
    out = scheduled(b)
    first, last = position(out, mfmas[0]), max(position(out, m) for m in mfmas)
    assert all(not first < position(out, x) < last for x in packed)
    assert any(first < position(out, x) < last for x in plain)


def test_independent_work_fills_the_wait_states_between_a_valu_write_and_its_mfma():
    """A VALU write read by an MFMA needs arch.every_mfma_hazard.valu_write_to_mfma_src wait states (2: LLVM's
    GCNHazardRecognizer, docs/hazards.md): the scheduler puts independent VALU work there (flash attention's
    rescaled accumulator before its PV MFMA, with the softmax's exp2s to hand), so the hazard pass adds no s_nop."""
    from tilegcn.amdgcn.hazards import insert_hazard_nops
    b = builder()
    acc = Reg("v", 16, 16)
    scale = [b.emit("v_mul_f32", v(16 + i), v(16 + i), v(80)) for i in range(16)]
    pv = b.emit(MFMA, acc, v(0, 4), v(4, 4), acc, defs=(acc,), uses=(v(0, 4), v(4, 4), acc))
    exps = [b.emit("v_exp_f32", v(120 + i), v(120 + i)) for i in range(4)]
    out = scheduled(b)
    between = out[position(out, scale[-1]) + 1:position(out, pv)]
    assert len(between) >= ARCH.every_mfma_hazard.valu_write_to_mfma_src
    assert all(any(x is e for e in exps) for x in between)
    padded = insert_hazard_nops(out, ARCH)  # (the next trip's v_mul_f32 behind the MFMA does need some)
    assert not any(x.op == "s_nop" for x in padded[position(padded, scale[-1]):position(padded, pv)])


def test_valu_work_no_mfma_waits_for_yields_to_the_reads_of_the_next_mfmas():
    """In an in-wave software pipeline's step the next tile's softmax (VALU work no MFMA of the step reads) comes
    before this tile's PV reads in program order; the reads go first, so the MFMAs they feed run beside the
    softmax instead of after it."""
    b = builder()
    softmax = [b.emit("v_exp_f32", v(120 + i), v(120 + i)) for i in range(40)]
    reads = [ds_read(b, 8 * i) for i in range(2)]
    mfmas = [mfma(b, acc, src=8 * acc) for acc in range(2)]
    out = scheduled(b)
    assert max(position(out, r) for r in reads) < min(position(out, x) for x in softmax)
    assert min(position(out, m) for m in mfmas) < max(position(out, x) for x in softmax)


def test_scc_definition_and_its_user_stay_together():
    b = builder()
    mfmas = [mfma(b, acc) for acc in range(4)]
    cmp = b.emit("s_cmp_lt_u32", s(1), s(2), defs=(), uses=(s(1), s(2)))
    select = b.emit("s_cselect_b32", s(3), 1, 0)  # reads SCC only: no register dependency on the compare
    add = b.emit("s_add_u32", s(4), s(4), 1)  # writes SCC: must not land between the compare and the select
    out = scheduled(b)
    assert position(out, cmp) < position(out, select) < position(out, add)
    assert position(out, cmp) < position(out, mfmas[-1])  # scalar work did move among the MFMAs


def test_nothing_vector_crosses_an_exec_write():
    b = builder()
    mfmas = [mfma(b, acc) for acc in range(4)]
    b.emit("v_cmp_gt_u32", VCC, 5, v(0), defs=(VCC,))
    saveexec = b.emit("s_and_saveexec_b64", s(10, 2), VCC, defs=(s(10, 2), EXEC), uses=(VCC, EXEC))
    masked = b.emit("v_mov_b32", v(50), 1)  # runs on the masked lanes only
    restore = b.emit("s_mov_b64", EXEC, s(10, 2), defs=(EXEC,), uses=(s(10, 2),))
    after = mfma(b, 6, src=60)  # independent of everything above but the mask
    out = scheduled(b)
    assert position(out, saveexec) < position(out, masked) < position(out, restore) < position(out, after)
    assert all(position(out, m) < position(out, saveexec) for m in mfmas)


def test_no_lds_access_crosses_a_barrier():
    b = builder()
    mfmas = [mfma(b, acc) for acc in range(4)]
    write = b.emit("ds_write_b128", v(100), v(20, 4), suffix="offset:0")
    read_before = ds_read(b, 30, 512)
    barrier = b.emit("s_barrier")
    read_after = ds_read(b, 24, 0)
    write_after = b.emit("ds_write_b128", v(101), v(36, 4), suffix="offset:1024")
    out = scheduled(b)
    assert max(position(out, write), position(out, read_before)) < position(out, barrier)
    assert position(out, barrier) < min(position(out, read_after), position(out, write_after))


def test_nothing_crosses_a_barrier():
    """MFMAs and VALU read registers only, yet none crosses a barrier: the MFMAs before it keep the pipe busy while the
    wave waits there for the others (moved after it, the wave would idle at the barrier with its MFMA work still to
    do), and the work after it stays after the waits it follows."""
    b = builder()
    before = [mfma(b, acc) for acc in range(4)]
    barrier = b.emit("s_barrier")
    after = [mfma(b, acc, src=40) for acc in range(4, 8)]  # independent of everything before the barrier
    valu = b.emit("v_perm_b32", v(90), v(91), v(92), s(7))
    out = scheduled(b)
    assert max(position(out, m) for m in before) < position(out, barrier)
    assert position(out, barrier) < min(position(out, m) for m in after + [valu])


def test_reads_of_one_stage_move_ahead_of_lds_dma_into_another():
    """An LDS DMA that names the pipeline stage it writes (`lds_tag`) is ordered with that stage's accesses and with
    barriers, not with ds_reads of other stages: the reads that feed the next MFMAs issue first, the copies of a
    later stage fill the slots between MFMAs. An untagged LDS write stays ordered with every read."""
    b = builder()
    mfma(b, 0, src=80)  # a block with MFMAs: the scheduler's domain
    stage = lds_tag(3)
    b.emit("s_mov_b32", isa.M0, s(12), defs=(isa.M0,), uses=(s(12),))
    dma = b.emit("buffer_load_dwordx4", v(9), s(16, 4), s(7), suffix="offen lds", defs=(stage,),
                 uses=(v(9), s(16, 4), s(7), isa.M0))
    reads = [ds_read(b, 20 + 4 * r, 16 * r) for r in range(2)]
    untagged = b.emit("ds_write_b128", v(101), v(36, 4), suffix="offset:1024")
    late_read = ds_read(b, 60, 2048)
    out = scheduled(b)
    assert position(out, reads[0]) < position(out, dma)  # issued while the DMA waits out its M0 write
    assert position(out, untagged) < position(out, late_read)


def test_only_loop_bodies_are_scheduled_and_their_ends_stay():
    b = KernelBuilder(ARCH, "k")
    straight = [mfma(b, acc) for acc in range(4)] + [ds_read(b, 40)]  # runs once: source order kept
    b.insts.append(isa.Inst(".Lloop", kind=isa.LABEL))
    mfmas = [mfma(b, acc) for acc in range(1, 4)]
    read = ds_read(b, 40)
    b.emit("s_cmp_lt_u32", s(1), 4, defs=(), uses=(s(1),))
    b.emit("s_cbranch_scc1", ".Lloop")
    b.emit("s_endpgm")
    out = schedule(b.insts, ARCH)
    assert out[:len(straight)] == straight
    label = next(i for i, x in enumerate(out) if x.kind == isa.LABEL)
    assert label == len(straight) < position(out, read) < position(out, mfmas[-1])
    assert out[-2].op == "s_cbranch_scc1" and out[-1].op == "s_endpgm"


# ---- a barrier waits for the LDS reads in flight: another wave may overwrite what they read ------------------------
def _read_barrier_overwrite(wait: bool) -> str:
    """Each lane reads its LDS word, the waves meet at s_barrier, then each lane overwrites the word of the lane 64
    away (in the other wave) and stores what it read: the read must have completed before the barrier."""
    body = [
        "s_load_dwordx2 s[4:5], s[0:1], 0",
        "v_lshlrev_b32 v1, 2, v0",  # my LDS word
        "v_xor_b32 v2, 0x100, v1",  # the other wave's
        "v_mov_b32 v3, 7",
        "ds_write_b32 v1, v0",
        "s_waitcnt lgkmcnt(0)",
        "s_barrier",
        "ds_read_b32 v4, v1",
    ]
    b = KernelBuilder(ARCH, "k")
    b.emit("ds_read_b32", v(4), v(1))
    b.emit("s_barrier")
    waited = [i.text().strip() for i in insert_waits(b.insts, ARCH)]
    body += waited[1:2] if wait else []  # the pass's own wait between the read and the barrier
    body += ["s_barrier", "ds_write_b32 v2, v3", "s_waitcnt lgkmcnt(0)",
             "s_mov_b32 s8, s4", "s_and_b32 s9, s5, 0xffff", "s_mov_b32 s10, 512", "s_mov_b32 s11, 0x20000",
             "buffer_store_dword v4, v1, s[8:11], 0 offen", "s_endpgm"]
    return "\n".join(body), waited


def test_barrier_waits_for_lds_reads_in_flight():
    body, waited = _read_barrier_overwrite(wait=True)
    assert waited == ["ds_read_b32 v4, v1", "s_waitcnt lgkmcnt(0)", "s_barrier"]
    out = torch.zeros(128, dtype=torch.int32)
    emukit.module(body, arch="gfx950", lds=512).launch("k", grid=(1, 1, 1), block=(128, 1, 1), args=[out])
    assert out.tolist() == list(range(128))
    unwaited, _ = _read_barrier_overwrite(wait=False)
    with pytest.raises(RaceError):  # the emulator's verdict on the same kernel without that wait
        emukit.module(unwaited, arch="gfx950", lds=512).launch("k", grid=(1, 1, 1), block=(128, 1, 1),
                                                               args=[torch.zeros(128, dtype=torch.int32)])


# ---- the compile option ------------------------------------------------------------------------------------------
def _gemm_operands():
    A = torch.randn(128, 256).to(torch.bfloat16)
    B = torch.randn(128, 256).to(torch.bfloat16)
    return A, B, torch.empty(128, 128, dtype=torch.bfloat16)


def test_schedule_option_changes_the_code_and_the_cache_key():
    plain = tilegcn.jit(kernels.gemm.fn, schedule="plain")
    args = _gemm_operands()
    options = dict(arch="gfx950", block_M=128, block_N=128, block_K=64, transpose_B=True, num_stages=2)
    a, b = kernels.gemm.compile(*args, **options), plain.compile(*args, **options)
    assert a.key != b.key and a.cache_path != b.cache_path  # two cache entries
    assert a.asm != b.asm and sorted(a.asm.splitlines()) != a.asm.splitlines()


def test_unknown_schedule_is_a_clear_error():
    with pytest.raises(ArgumentError, match=r"schedule='fast'.*'interleave', 'plain'"):
        tilegcn.jit(kernels.gemm.fn, schedule="fast")
    with pytest.raises(ArgumentError, match="schedule"):
        tilegcn.jit(schedule="Plain")(kernels.gemm.fn)
    with pytest.raises(ArgumentError, match=r"decorator option: tilegcn.jit\(gemm, schedule=...\)"):
        kernels.gemm.compile(*_gemm_operands(), arch="gfx950", schedule="plain")  # not a per-call argument


@pytest.mark.parametrize("arch", ["gfx950", "gfx942"])
def test_pipelined_gemm_is_right_with_either_schedule(arch, monkeypatch):
    """The same kernel scheduled both ways agrees with torch on the emulator (hazard and race checks on)."""
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")
    A = torch.randn(96, 160).to(torch.bfloat16)
    B = torch.randn(160, 80).to(torch.bfloat16)
    expected = (A.float() @ B.float()).to(torch.bfloat16)
    for fn in (kernels.gemm, tilegcn.jit(kernels.gemm.fn, schedule="plain")):
        C = torch.zeros(96, 80, dtype=torch.bfloat16)
        fn(A, B, C, arch=arch, block_M=64, block_N=64, block_K=32, num_stages=2)
        torch.testing.assert_close(C.float(), expected.float(), rtol=2e-2, atol=0.5)
