"""Scalar ALU, SMEM, branches, initial register state and wave divergence on the emulated device."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import kernel_asm, build, module, run_lanes, srd  # noqa: E402
from tilegcn.runtime import codeobject  # noqa: E402
from tilegcn.toolchain import assemble  # noqa: E402

U32 = 0xFFFFFFFF


def scalar_results(body, inputs, n_out):
    """Run a one-wave kernel: s[40+i] = inputs[i] (loaded by SMEM from a tensor), `body`, then store
    s[60+j] for j < n_out to the output tensor (as u32)."""
    pre = ["s_load_dwordx2 s[4:5], s[0:1], 0x0", "s_load_dwordx2 s[6:7], s[0:1], 0x8", "s_waitcnt lgkmcnt(0)",
           "s_load_dwordx16 s[40:55], s[4:5], 0x0", "s_waitcnt lgkmcnt(0)"]
    post = srd(8, 6, 4 * n_out).splitlines() + ["v_mov_b32 v1, 0"]
    for j in range(n_out):
        post += [f"v_mov_b32 v2, s{60 + j}", f"buffer_store_dword v2, off, s[8:11], 0 offset:{4 * j}"]
    text = kernel_asm("\n".join(pre + body.strip().splitlines() + post + ["s_endpgm"]), args=("ptr", "ptr"),
                      sgprs=102, vgprs=8)
    words = [x & U32 for x in inputs] + [0] * (16 - len(inputs))
    inp = torch.tensor([(w ^ 0x80000000) - 0x80000000 for w in words], dtype=torch.int32)  # same bits, as int32
    out = torch.zeros(n_out, dtype=torch.int32)
    build(text).launch("k", (1, 1, 1), (64, 1, 1), [inp, out])
    return [int(v) & U32 for v in out]


def sx(v):
    v &= U32
    return v - 2**32 if v >> 31 else v


X, Y = 0xF00DBEEF, 0x0000_1234
CASES = [
    ("s_add_u32 s60, s40, s41\ns_cselect_b32 s61, 1, 0", [X, 0x20000000], [(X + 0x20000000) & U32, 1]),
    ("s_add_u32 s60, s40, s41\ns_addc_u32 s61, s42, s43", [0xFFFFFFFF, 1, 5, 6], [0, 12]),
    ("s_sub_u32 s60, s40, s41\ns_subb_u32 s61, s42, s43", [1, 2, 10, 3], [U32, 6]),
    ("s_mul_i32 s60, s40, s41\ns_mul_hi_u32 s61, s40, s41", [X, Y], [(X * Y) & U32, (X * Y) >> 32]),
    ("s_mul_hi_i32 s60, s40, s41", [X, 0xFFFF0000], [((sx(X) * sx(0xFFFF0000)) >> 32) & U32]),
    ("s_lshl_b32 s60, s40, 4\ns_lshr_b32 s61, s40, 4\ns_ashr_i32 s62, s40, 4", [X], [(X << 4) & U32, X >> 4,
                                                                                  (sx(X) >> 4) & U32]),
    ("s_and_b32 s60, s40, s41\ns_or_b32 s61, s40, s41\ns_xor_b32 s62, s40, s41\ns_andn2_b32 s63, s40, s41\n"
     "s_orn2_b32 s64, s40, s41\ns_not_b32 s65, s40", [X, Y],
     [X & Y, X | Y, X ^ Y, X & ~Y & U32, (X | ~Y) & U32, ~X & U32]),
    ("s_bfe_u32 s60, s40, 0x80004\ns_bfe_i32 s61, s40, 0x80010", [X], [(X >> 4) & 0xFF,
                                                                     (((X >> 16) & 0xFF) ^ 0x80) - 0x80 & U32]),
    ("s_and_b64 s[60:61], s[40:41], s[42:43]\ns_lshl_b64 s[62:63], s[40:41], 36\ns_not_b64 s[64:65], s[40:41]",
     [X, Y, 0x0F0F0F0F, 0xFFFF0000], [X & 0x0F0F0F0F, Y & 0xFFFF0000, 0, (X << 4) & U32, ~X & U32, ~Y & U32]),
    ("s_movk_i32 s60, 0x8000\ns_mov_b32 s61, -16\ns_mov_b64 s[62:63], -1\ns_mov_b32 s64, 0.5",
     [], [0xFFFF8000, (-16) & U32, U32, U32, 0x3F000000]),
    ("s_min_u32 s60, s40, s41\ns_max_i32 s61, s40, s41\ns_cselect_b32 s62, 1, 2", [X, Y], [Y, Y, 2]),
    ("s_cmp_lt_u32 s40, s41\ns_cselect_b32 s60, 1, 2\ns_cmp_lt_i32 s40, s41\ns_cselect_b32 s61, 1, 2\n"
     "s_cmp_eq_u64 s[40:41], s[40:41]\ns_cselect_b32 s62, 1, 2\ns_cmpk_eq_u32 s41, 0x1234\ns_cselect_b32 s63, 1, 2",
     [X, Y], [2, 1, 1, 1]),
    ("s_mov_b32 s60, s40\ns_addk_i32 s60, 0x10\ns_mulk_i32 s60, -2\ns_bitcmp1_b32 s40, 0\ns_cselect_b32 s61, 1, 2",
     [100], [(-2 * 116) & U32, 2]),
    ("s_lshl2_add_u32 s60, s40, s41\ns_pack_ll_b32_b16 s61, s40, s41\ns_pack_hh_b32_b16 s62, s40, s41",
     [X, Y], [(X * 4 + Y) & U32, (X & 0xFFFF) | ((Y & 0xFFFF) << 16), (X >> 16) | (Y & 0xFFFF0000)]),
    ("s_cmp_gt_u32 s40, 5\ns_cmov_b32 s60, s41\ns_cmp_gt_u32 s40, 500\ns_cmov_b32 s61, s41", [10, Y, 7], [Y, 0]),
]


@pytest.mark.parametrize("body,inputs,expect", CASES, ids=[c[0].split()[0] + str(i) for i, c in enumerate(CASES)])
def test_salu(body, inputs, expect):
    assert scalar_results(body, inputs, len(expect)) == expect


def test_smem_loads_kernargs_and_tensor_words():
    """s_load_dword / x2 / x4 / x8 with immediate and SGPR offsets read the kernarg segment and tensors."""
    body = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              s_load_dword s6, s[0:1], 0x8
              s_load_dword s7, s[0:1], 0xc
              s_waitcnt lgkmcnt(0)
              s_load_dwordx8 s[16:23], s[4:5], 0x20
              s_mov_b32 s24, 12
              s_load_dword s25, s[4:5], s24
              s_load_dwordx4 s[28:31], s[4:5], s24 offset:0x4
              s_waitcnt lgkmcnt(0)
              s_add_u32 s26, s6, s7
              s_add_u32 s26, s26, s16
              s_add_u32 s26, s26, s23
              s_add_u32 s26, s26, s25
              s_add_u32 s26, s26, s31
              v_mov_b32 v1, 0
              v_mov_b32 v2, s26
              """ + srd(8, 4, 256) + """
              buffer_store_dword v2, off, s[8:11], 0
              s_endpgm"""
    mod = module(body, args=("ptr", "u32", "u32"), sgprs=40, vgprs=8)
    t = torch.arange(64, dtype=torch.int32) * 3
    mod.launch("k", (1, 1, 1), (64, 1, 1), [t, 1000, 2000])
    expect = 1000 + 2000 + 3 * 8 + 3 * 15 + 3 * 3 + 3 * 7  # 0x20/4 = 8, 15; 12/4 = 3; (12+4)/4 + 3 = 7
    assert int(t[0]) == expect


def test_uniform_loop_with_scc_branch_sums_a_row():
    """s_cbranch_scc1 loop: out[t] = sum_k in[t + 64*k] for k < n (n a kernel argument)."""
    body = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              s_load_dwordx2 s[6:7], s[0:1], 0x8
              s_load_dword s20, s[0:1], 0x10
              v_and_b32 v1, 0x3ff, v0
              v_lshlrev_b32 v1, 2, v1
              v_mov_b32 v3, 0
              s_mov_b32 s21, 0
              s_waitcnt lgkmcnt(0)
              """ + srd(8, 4, 4096) + "\n" + srd(12, 6, 256) + """
            .Lloop:
              buffer_load_dword v2, v1, s[8:11], 0 offen
              s_waitcnt vmcnt(0)
              v_add_f32 v3, v3, v2
              v_add_u32 v1, 0x100, v1
              s_add_u32 s21, s21, 1
              s_cmp_lt_u32 s21, s20
              s_cbranch_scc1 .Lloop
              v_and_b32 v1, 0x3ff, v0
              v_lshlrev_b32 v1, 2, v1
              buffer_store_dword v3, v1, s[12:15], 0 offen
              s_endpgm"""
    mod = module(body, args=("ptr", "ptr", "u32"), sgprs=32, vgprs=8)
    x = torch.randn(16, 64)
    out = torch.zeros(64)
    stats = mod.launch("k", (1, 1, 1), (64, 1, 1), [x.view(-1), out, 11])
    ref = torch.zeros(64)
    for k in range(11):
        ref = ref + x[k]
    assert torch.equal(out, ref)
    assert stats.instructions["branch"] == 11 and stats.instructions["vmem"] == 12


def test_initial_state_packed_workitem_ids_and_workgroup_ids():
    """v0 = x | y << 10 | z << 20 (mode XYZ); s2, s3, s4 = workgroup id x, y, z (derived from the descriptor)."""
    body = """s_load_dwordx2 s[6:7], s[0:1], 0x0
              v_mov_b32 v1, v0
              s_waitcnt lgkmcnt(0)
              s_mul_i32 s8, s4, 3
              s_add_u32 s8, s8, s3
              s_mul_i32 s8, s8, 2
              s_add_u32 s8, s8, s2
              s_mul_i32 s8, s8, 256
              v_and_b32 v2, 0x3ff, v0
              v_bfe_u32 v3, v0, 10, 10
              v_bfe_u32 v4, v0, 20, 10
              v_mad_u32_u24 v5, v4, 4, v3
              v_mad_u32_u24 v5, v5, 8, v2
              v_add_u32 v5, s8, v5
              v_lshlrev_b32 v5, 2, v5
              """ + srd(12, 6, 1 << 20) + """
              buffer_store_dword v1, v5, s[12:15], 0 offen
              s_endpgm"""
    mod = module(body, wg_ids="xyz", workitem=2, sgprs=24, vgprs=8)
    out = torch.full((2 * 3 * 2 * 256,), -1, dtype=torch.int32)
    mod.launch("k", (2, 3, 2), (8, 4, 8), [out])
    o = out.view(2, 3, 2, 8, 4, 8)  # [wg z][wg y][wg x][z][y][x]
    z, y, x = torch.meshgrid(torch.arange(8), torch.arange(4), torch.arange(8), indexing="ij")
    packed = (x | (y << 10) | (z << 20)).to(torch.int32)
    assert torch.equal(o, packed.expand_as(o))


def test_descriptor_drives_the_sgpr_layout():
    """With the dispatch pointer enabled, the kernarg pointer moves to s[2:3] and workgroup id x to s4."""
    body = """s_load_dwordx2 s[6:7], s[2:3], 0x0
              v_and_b32 v1, 0x3ff, v0
              s_waitcnt lgkmcnt(0)
              """ + srd(8, 6, 1024) + """
              v_mov_b32 v2, s4
              v_lshlrev_b32 v1, 2, v1
              s_lshl_b32 s5, s4, 8
              v_add_u32 v1, s5, v1
              buffer_store_dword v2, v1, s[8:11], 0 offen
              s_endpgm"""
    text = kernel_asm(body, sgprs=16, vgprs=8, extra="  .amdhsa_user_sgpr_dispatch_ptr 1")
    hsaco = assemble(text, "gfx942")
    kd = codeobject.parse(hsaco).kernels["k"].descriptor
    assert [(n, s) for n, s, _ in kd.user_sgpr_layout()] == [("dispatch_ptr", 0), ("kernarg_segment_ptr", 2)]
    assert kd.system_sgpr_layout() == [("workgroup_id_x", 4)]
    out = torch.zeros(4 * 64, dtype=torch.int32)
    build(text).launch("k", (4, 1, 1), (64, 1, 1), [out])
    assert torch.equal(out, torch.arange(4).repeat_interleave(64).to(torch.int32))


def test_partial_wave_exec_covers_only_existing_lanes():
    """A 100-thread block has a second wave with 36 lanes: EXEC = 2^36 - 1 there."""
    out = run_lanes("v_mov_b32 v20, exec_lo\nv_mov_b32 v21, exec_hi", [torch.zeros(100, dtype=torch.int32)], 2,
                    block=100)
    assert set(out[0][:64].tolist()) == {-1} and set(out[1][:64].tolist()) == {-1}
    assert set(out[0][64:].tolist()) == {-1} and set(out[1][64:].tolist()) == {(1 << 4) - 1}


def test_divergent_waves_split_and_reconverge():
    """Waves of one workgroup branch differently on their wave index; all reach the common tail."""
    body = """s_load_dwordx2 s[6:7], s[0:1], 0x0
              v_and_b32 v1, 0x3ff, v0
              s_nop 0
              v_readfirstlane_b32 s20, v1
              s_lshr_b32 s20, s20, 6
              v_mov_b32 v2, 100
              s_waitcnt lgkmcnt(0)
              """ + srd(8, 6, 4096) + """
              s_cmp_eq_u32 s20, 1
              s_cbranch_scc1 .Lone
              s_cmp_eq_u32 s20, 2
              s_cbranch_scc0 .Ltail
              v_add_u32 v2, 20, v2
              s_branch .Ltail
            .Lone:
              v_add_u32 v2, 10, v2
            .Ltail:
              v_add_u32 v2, v2, s20
              v_lshlrev_b32 v1, 2, v1
              buffer_store_dword v2, v1, s[8:11], 0 offen
              s_endpgm"""
    mod = module(body, sgprs=24, vgprs=8)
    out = torch.zeros(256, dtype=torch.int32)
    stats = mod.launch("k", (1, 1, 1), (256, 1, 1), [out])
    expect = torch.tensor([100, 111, 122, 103], dtype=torch.int32).repeat_interleave(64)
    assert torch.equal(out, expect)
    assert stats.by_mnemonic["buffer_store_dword"] == 4


def test_vccz_and_execz_branches():
    body = """v_mov_b32 v20, 1
              s_mov_b32 s96, 1000000
              s_mov_b32 s97, -2000000000
              v_cmp_gt_i32_e64 vcc, v10, s96
              s_cbranch_vccnz .Lsome
              v_mov_b32 v20, 2
            .Lsome:
              v_cmpx_lt_i32_e64 vcc, v10, s97
              s_cbranch_execz .Lnone
              v_mov_b32 v20, 3
            .Lnone:
              s_mov_b64 exec, -1"""
    small = torch.arange(256, dtype=torch.int32)
    assert set(run_lanes(body, [small])[0].tolist()) == {2}  # vcc zero: fall through; exec zero: skip
    big = small.clone()
    big[5] = 2000000
    big[70] = -2100000000
    got = run_lanes(body, [big])[0]
    assert got[70] == 3 and set(got[:64].tolist()) == {1} and set(got[128:].tolist()) == {2}
