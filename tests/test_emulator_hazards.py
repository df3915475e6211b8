"""The emulated device's checks: asynchrony hazards, LDS races, MFMA wait states, bounds, unknown instructions.

Each faulty kernel must raise the right error type with a message that names the instruction and the
wave; the corrected kernel must run and produce the right data.
"""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import module, srd  # noqa: E402
from tilegcn.amdgcn.arch import get_arch  # noqa: E402
from tilegcn.errors import EmulatorError, HazardError, RaceError  # noqa: E402

PROLOGUE = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              s_load_dwordx2 s[6:7], s[0:1], 0x8
              v_and_b32 v1, 0x3ff, v0
              v_lshlrev_b32 v2, 2, v1
              s_waitcnt lgkmcnt(0)"""


def kernel(body, arch="gfx942", lds=0, **kw):
    text = "\n".join([PROLOGUE, srd(8, 4, 4096), srd(12, 6, 4096), body, "s_endpgm"])
    kw.setdefault("sgprs", 32)
    kw.setdefault("vgprs", 32)
    return module(text, arch=arch, args=("ptr", "ptr"), lds=lds, **kw)


def launch(mod, threads=64, src=None, dst=None):
    src = torch.arange(1024, dtype=torch.int32) if src is None else src
    dst = torch.zeros(1024, dtype=torch.int32) if dst is None else dst
    mod.launch("k", (1, 1, 1), (threads, 1, 1), [src, dst])
    return src, dst


# ---- registers written by in-flight loads --------------------------------------------------------------
LOAD_USE = """buffer_load_dword v3, v2, s[8:11], 0 offen
              {wait}
              v_add_u32 v4, 1, v3
              buffer_store_dword v4, v2, s[12:15], 0 offen"""


def test_reading_a_loaded_vgpr_before_waitcnt_is_a_hazard():
    with pytest.raises(HazardError) as e:
        launch(kernel(LOAD_USE.format(wait="")))
    msg = str(e.value)
    assert "v_add_u32_e32 v4, 1, v3" in msg and "wave 0 of workgroup (0, 0, 0)" in msg
    assert "reads v3" in msg and "buffer_load_dword v3, v2, s[8:11], 0 offen" in msg
    src, dst = launch(kernel(LOAD_USE.format(wait="s_waitcnt vmcnt(0)")))
    assert torch.equal(dst[:64], src[:64] + 1)


def test_overwriting_a_register_an_inflight_load_will_write_is_a_hazard():
    body = """buffer_load_dword v3, v2, s[8:11], 0 offen
              v_mov_b32 v3, 0
              s_waitcnt vmcnt(0)"""
    with pytest.raises(HazardError, match=r"v_mov_b32_e32 v3, 0`: wave 0 of workgroup \(0, 0, 0\): overwrites v3"):
        launch(kernel(body))


def test_vmcnt_retires_in_order_and_counts_stores():
    """vmcnt(1) guarantees all but the youngest VMEM op (a store counts too)."""
    body = """buffer_load_dword v3, v2, s[8:11], 0 offen
              buffer_load_dword v4, v2, s[8:11], 0 offen offset:256
              buffer_store_dword v1, v2, s[12:15], 0 offen offset:512
              s_waitcnt vmcnt(1)
              v_add_u32 v5, v3, v4
              buffer_store_dword v5, v2, s[12:15], 0 offen"""
    src, dst = launch(kernel(body))
    assert torch.equal(dst[:64], src[:64] + src[64:128])
    assert torch.equal(dst[128:192], torch.arange(64, dtype=torch.int32))
    with pytest.raises(HazardError, match="reads v4"):
        launch(kernel(body.replace("vmcnt(1)", "vmcnt(2)")))


def test_smem_needs_lgkmcnt_zero():
    """Scalar loads return out of order: lgkmcnt(1) guarantees neither of two outstanding s_loads."""
    body = """s_load_dword s16, s[4:5], 0x0
              s_load_dword s17, s[4:5], 0x4
              s_waitcnt lgkmcnt({n})
              s_add_u32 s18, s16, s17
              v_mov_b32 v3, s18
              buffer_store_dword v3, v2, s[12:15], 0 offen"""
    with pytest.raises(HazardError, match=r"s_add_u32 s18, s16, s17.*reads s16"):
        launch(kernel(body.format(n=1)))
    src, dst = launch(kernel(body.format(n=0)))
    assert torch.equal(dst[:64], torch.full((64,), int(src[0] + src[1]), dtype=torch.int32))


# ---- LDS: DMA in flight, cross-wave races -----------------------------------------------------------------
DMA_READ = """s_mov_b32 m0, 0
              s_nop 0
              buffer_load_dword v2, s[8:11], 0 offen lds
              {wait}
              ds_read_b32 v3, v2
              s_waitcnt lgkmcnt(0)
              buffer_store_dword v3, v2, s[12:15], 0 offen"""


def test_ds_read_of_lds_dma_data_before_vmcnt_is_a_hazard():
    with pytest.raises(HazardError) as e:
        launch(kernel(DMA_READ.format(wait=""), lds=256))
    msg = str(e.value)
    assert "ds_read_b32 v3, v2" in msg and "LDS DMA" in msg and "wave 0 of workgroup (0, 0, 0), lane 0" in msg
    src, dst = launch(kernel(DMA_READ.format(wait="s_waitcnt vmcnt(0)"), lds=256))
    assert torch.equal(dst[:64], src[:64])


def test_buffer_lds_dma_right_after_an_m0_write_runs():
    """The ISA guide's M0 row names global / scratch LDS loads, not MUBUF ones (docs/hazards.md, "M0 and LDS DMA")."""
    body = DMA_READ.format(wait="s_waitcnt vmcnt(0)").replace("s_nop 0\n", "")
    src, dst = launch(kernel(body, lds=256))
    assert torch.equal(dst[:64], src[:64])


GLOBAL_DMA_READ = """s_mov_b32 m0, 0
              {nops}
              global_load_lds_dword v2, s[4:5]
              s_waitcnt vmcnt(0)
              ds_read_b32 v3, v2
              s_waitcnt lgkmcnt(0)
              buffer_store_dword v3, v2, s[12:15], 0 offen"""


def test_global_lds_dma_right_after_an_m0_write_is_a_hazard():
    need = get_arch("gfx950").m0_write_to_lds_dma_nops + 1
    with pytest.raises(HazardError, match=rf"global_load_lds_dword v2, s\[4:5\].*reads M0 0 wait states "
                                          rf"after it was written; gfx950 needs {need}"):
        launch(kernel(GLOBAL_DMA_READ.format(nops=""), arch="gfx950", lds=256))
    src, dst = launch(kernel(GLOBAL_DMA_READ.format(nops=f"s_nop {need - 1}"), arch="gfx950", lds=256))
    assert torch.equal(dst[:64], src[:64])


# Two waves: each writes its own 256 bytes of LDS and reads the other wave's.
EXCHANGE = """v_xor_b32 v3, 0x100, v2
              ds_write_b32 v2, v1
              s_waitcnt lgkmcnt(0)
              {sync}
              ds_read_b32 v4, v3
              s_waitcnt lgkmcnt(0)
              buffer_store_dword v4, v2, s[12:15], 0 offen"""


def test_cross_wave_read_after_write_without_barrier_is_a_race():
    with pytest.raises(RaceError) as e:
        launch(kernel(EXCHANGE.format(sync=""), lds=512), threads=128)
    msg = str(e.value)
    assert "ds_read_b32 v4, v3" in msg and "of workgroup (0, 0, 0)" in msg and "wrote in this barrier epoch" in msg
    src, dst = launch(kernel(EXCHANGE.format(sync="s_barrier"), lds=512), threads=128)
    assert torch.equal(dst[:128], torch.arange(128, dtype=torch.int32).roll(64))


def test_barrier_does_not_wait_for_lds_writes():
    """s_barrier without a preceding s_waitcnt: the write retires after the barrier, in the next epoch."""
    body = EXCHANGE.replace("ds_write_b32 v2, v1\n              s_waitcnt lgkmcnt(0)", "ds_write_b32 v2, v1")
    with pytest.raises(RaceError):
        launch(kernel(body.format(sync="s_barrier"), lds=512), threads=128)


WAR = """v_xor_b32 v3, 0x100, v2
         ds_write_b32 v2, v1
         s_waitcnt lgkmcnt(0)
         s_barrier
         ds_read_b32 v4, v3
         s_waitcnt lgkmcnt(0)
         {sync}
         v_add_u32 v5, 1000, v1
         ds_write_b32 v2, v5
         s_waitcnt lgkmcnt(0)
         buffer_store_dword v4, v2, s[12:15], 0 offen"""


def test_overwriting_lds_another_wave_still_reads_is_a_race():
    with pytest.raises(RaceError) as e:
        launch(kernel(WAR.format(sync=""), lds=512), threads=128)
    msg = str(e.value)
    assert "ds_write_b32 v2, v5" in msg and "read in this barrier epoch" in msg and "write-after-read" in msg
    src, dst = launch(kernel(WAR.format(sync="s_barrier"), lds=512), threads=128)
    assert torch.equal(dst[:128], torch.arange(128, dtype=torch.int32).roll(64))


def test_dma_from_another_wave_needs_waitcnt_and_barrier():
    """Wave w DMAs 256 bytes to LDS [256w, 256w + 256); the other wave reads them."""
    body = """v_readfirstlane_b32 s16, v1
              s_lshl_b32 s16, s16, 2
              s_mov_b32 m0, s16
              s_nop 0
              buffer_load_dword v2, s[8:11], 0 offen lds
              s_waitcnt vmcnt(0)
              {sync}
              v_xor_b32 v3, 0x100, v2
              ds_read_b32 v4, v3
              s_waitcnt lgkmcnt(0)
              buffer_store_dword v4, v2, s[12:15], 0 offen"""
    with pytest.raises(RaceError, match="ds_read_b32 v4, v3"):
        launch(kernel(body.format(sync=""), lds=512), threads=128)
    src, dst = launch(kernel(body.format(sync="s_barrier"), lds=512), threads=128)
    assert torch.equal(dst[:128], src[:128].roll(64))


# ---- MFMA wait states --------------------------------------------------------------------------------------
def mfma_kernel(body, arch="gfx942"):
    pre = """v_mov_b32 v2, 0x3f803f80
             v_mov_b32 v3, 0x3f803f80
             v_mov_b32 v4, 0x3f803f80
             v_mov_b32 v5, 0x3f803f80
             v_accvgpr_write_b32 a0, 0
             v_accvgpr_write_b32 a1, 0
             v_accvgpr_write_b32 a2, 0
             v_accvgpr_write_b32 a3, 0
             v_accvgpr_write_b32 a4, 0
             v_accvgpr_write_b32 a5, 0
             s_nop 1"""
    return kernel("\n".join([pre, body]), arch=arch, vgprs=48, accum=32)


MFMA = "v_mfma_f32_16x16x16_bf16 a[0:3], v[2:3], v[4:5], a[0:3]"


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_reading_mfma_result_needs_the_arch_wait_states(arch):
    need = get_arch(arch).mfma_hazards.vdst_to_read[4]
    early = f"{MFMA}\ns_nop {need - 2}\nv_accvgpr_read_b32 v6, a0"
    with pytest.raises(HazardError) as e:
        launch(mfma_kernel(early, arch))
    msg = str(e.value)
    assert "v_accvgpr_read_b32 v6, a0" in msg and f"after {need - 1} wait states; {arch} needs {need}" in msg
    body = f"{MFMA}\ns_nop {need - 1}\nv_accvgpr_read_b32 v6, a0\n" \
           "v_lshlrev_b32 v7, 2, v1\nbuffer_store_dword v6, v7, s[12:15], 0 offen"
    src, dst = launch(mfma_kernel(body, arch))
    assert torch.equal(dst[:64].view(torch.float32), torch.full((64,), 16.0))  # 16 products of 1.0 * 1.0


def test_back_to_back_accumulation_is_free_but_partial_overlap_is_not():
    launch(mfma_kernel(f"{MFMA}\n{MFMA}\n{MFMA}"))  # srcC = previous vdst exactly: 0 wait states
    overlap = "v_mfma_f32_16x16x16_bf16 a[2:5], v[2:3], v[4:5], a[2:5]"
    need = get_arch("gfx942").mfma_hazards.vdst_to_srcc_overlap[4]  # checked against llc in test_hazards_llvm
    with pytest.raises(HazardError, match=rf"srcC \(partially overlapping\).*needs {need}"):
        launch(mfma_kernel(f"{MFMA}\n{overlap}"))
    launch(mfma_kernel(f"{MFMA}\ns_nop {need - 1}\n{overlap}"))


def test_valu_write_then_mfma_source_needs_a_wait_state():
    body = f"v_mov_b32 v4, 0x3f803f80\n{MFMA}"
    with pytest.raises(HazardError, match="reads as MFMA source a register `v_mov_b32_e32 v4"):
        launch(mfma_kernel(body))
    need = get_arch("gfx942").mfma_hazards.valu_write_to_mfma_src
    with pytest.raises(HazardError, match="reads as MFMA source"):
        launch(mfma_kernel(f"v_mov_b32 v4, 0x3f803f80\ns_nop {need - 2}\n{MFMA}"))
    launch(mfma_kernel(f"v_mov_b32 v4, 0x3f803f80\ns_nop {need - 1}\n{MFMA}"))


# ---- bounds and unknown instructions ------------------------------------------------------------------------
def test_registers_beyond_the_descriptor_counts_are_errors():
    with pytest.raises(EmulatorError, match=r"v_mov_b32_e32 v9, 0.*v9 is beyond the kernel's 8 VGPRs"):
        launch(kernel("v_mov_b32 v9, 0", vgprs=8))
    # next_free_vgpr 12 allocates 2 granules of 8 = 16 unified registers: v0..v7, a0..a7
    launch(kernel("v_accvgpr_write_b32 a7, 0", vgprs=12, accum=8))
    with pytest.raises(EmulatorError, match=r"a8 is beyond the kernel's 8 AGPRs"):
        launch(kernel("v_accvgpr_write_b32 a8, 0", vgprs=12, accum=8))
    # a v-register past accum_offset is the unified register there, a[n - accum_offset] (aiter's FAv3 forward
    # kernels use v160..v255 with accum_offset 160); past the allocation it is still an error
    with pytest.raises(EmulatorError, match=r"v16 is beyond the kernel's 16 VGPRs"):
        launch(kernel("v_mov_b32 v16, 0", vgprs=12, accum=8))
    _, dst = launch(kernel("v_mov_b32 v13, 0x1234\nv_nop\nv_accvgpr_read_b32 v3, a5\ns_nop 1\n"
                           "buffer_store_dword v3, v2, s[12:15], 0 offen", vgprs=12, accum=8))
    assert int(dst[0]) == 0x1234


def test_a_workgroup_whose_waves_cannot_share_the_register_file_is_refused():
    """Each SIMD holds 512 VGPR+AGPR registers per lane; a workgroup's waves spread over the CU's 4 SIMDs. A
    wave of 264 registers (next_free_vgpr 264: 136 VGPRs + 128 AGPRs) fits one per SIMD: 4 waves launch, 8
    (two a SIMD) cannot be resident, and a GPU refuses the launch."""
    mod = kernel("s_nop 0", vgprs=264, accum=136)
    launch(mod, threads=256)
    with pytest.raises(EmulatorError, match=r"264 VGPRs\+AGPRs per wave.*fits 4 of its waves.*512 threads has 8"):
        launch(mod, threads=512)
    launch(kernel("s_nop 0", vgprs=256, accum=128), threads=512)  # 256 each: two a SIMD fit


def test_unknown_instruction_is_named_when_it_executes():
    with pytest.raises(EmulatorError, match=r"pc 0x[0-9a-f]+ `v_sin_f32_e32 v3, v1`.*unknown instruction"):
        launch(kernel("v_sin_f32 v3, v1"))


def test_lds_request_beyond_the_arch_limit_is_refused():
    with pytest.raises(EmulatorError, match="65536"):
        launch(kernel("s_nop 0", arch="gfx950", lds=100000, run_as="gfx942"))


def test_check_false_skips_the_checks_but_keeps_asynchrony():
    mod = kernel(LOAD_USE.format(wait=""))
    src = torch.arange(1024, dtype=torch.int32)
    dst = torch.zeros(1024, dtype=torch.int32)
    mod.launch("k", (1, 1, 1), (64, 1, 1), [src, dst], check=False)
    assert torch.equal(dst[:64], torch.ones(64, dtype=torch.int32))  # v3 still 0 when read: load not retired


def test_a_loop_that_never_exits_stops_with_an_error(monkeypatch):
    monkeypatch.setenv("TILEGCN_EMULATOR_MAX_STEPS", "2000")
    with pytest.raises(EmulatorError, match=r"`s_(add_u32|branch) .*does a loop never exit"):  # counts: no spin
        module(".Lspin:\ns_add_u32 s4, s4, 1\ns_branch .Lspin\ns_endpgm", args=()).launch(
            "k", (1, 1, 1), (64, 1, 1), [])


# ---- the transcendental forwarding hazard, end to end (docs/hazards.md) ----------------------------------------

import tilegcn  # noqa: E402
from tilegcn import language as T  # noqa: E402


@tilegcn.jit
def exp2_times_3(X, Y, *, block=16):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=64) as (bx, by):
        x = T.alloc_fragment((block, block), "float32")
        T.copy(X[by * block, bx * block], x)
        for i, j in T.Parallel(block, block):
            x[i, j] = T.exp2(x[i, j]) * 3
        T.copy(x, Y[by * block, bx * block])


def wait_states_before_first_reader(asm: str, producer: str) -> list:
    """For each `producer` instruction (e.g. v_exp_f32) of the kernel text: the wait states issued between it and
    the first later instruction that reads its destination (s_nop N: N + 1, any other instruction: 1)."""
    lines = [ln.split("//")[0].strip() for ln in asm.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith((".", ";")) and not ln.endswith(":")]
    out = []
    for k, ln in enumerate(lines):
        if ln.split()[0] != producer:
            continue
        dst = ln.split()[1].rstrip(",")
        states = 0
        for later in lines[k + 1:]:
            op, _, operands = later.partition(" ")
            if dst in [o.strip() for o in operands.split(",")[1:]]:
                out.append(states)
                break
            states += int(operands) + 1 if op == "s_nop" else 1
    return out


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_exp2_times_3_waits_for_the_transcendental_and_matches_torch(arch, monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")
    x = torch.linspace(-4, 4, 16 * 16).reshape(16, 16)
    y = torch.empty_like(x)
    k = exp2_times_3.compile(x, y, arch=arch)
    need = get_arch(arch).valu_hazards.trans_to_valu_read
    states = wait_states_before_first_reader(k.asm, "v_exp_f32")
    assert states and min(states) >= need, f"{arch}: wait states after each v_exp_f32: {states}"
    exp2_times_3(x, y, arch=arch)
    torch.testing.assert_close(y, torch.exp2(x) * 3, rtol=2e-6, atol=0)
