"""Cross-lane instructions on the emulated device: DPP controls, SDWA selects, v_permlane*_swap (gfx950).

References are written lane by lane in plain Python from the CDNA3/CDNA4 guides' definitions (source lane
of each DPP control, row/bank masks, bound_ctrl), independent of the emulator's vectorised code.
Kernels run with 64-thread blocks so each wave's lanes are the inputs' consecutive elements. A DPP instruction or a
permlane swap reading a VGPR a VALU just wrote needs two wait states (docs/hazards.md): the bodies carry the
`s_nop 1` the compiler's hazard pass would place there.
"""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import lane_ir, llc_module, run_lanes  # noqa: E402

N = 128
gen = torch.Generator().manual_seed(11)
A = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)
OLD = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)


def source_lane(ctrl, lane):
    """The lane a DPP control reads for `lane`, or None when it is out of the row / wave."""
    kind, arg = ctrl
    row, r = lane // 16 * 16, lane % 16
    if kind == "quad_perm":
        return lane // 4 * 4 + arg[lane % 4]
    if kind == "row_shl":
        return lane + arg if r + arg < 16 else None
    if kind == "row_shr":
        return lane - arg if r - arg >= 0 else None
    if kind == "row_ror":
        return row + (r - arg) % 16
    if kind == "wave_shl":
        return lane + 1 if lane < 63 else None
    if kind == "wave_rol":
        return (lane + 1) % 64
    if kind == "wave_shr":
        return lane - 1 if lane > 0 else None
    if kind == "wave_ror":
        return (lane - 1) % 64
    if kind == "row_mirror":
        return row + 15 - r
    if kind == "row_half_mirror":
        return lane // 8 * 8 + 7 - lane % 8
    if kind == "row_bcast":
        if arg == 15:
            return row - 1 if lane >= 16 else None
        return 31 if lane >= 32 else None
    if kind == "row_newbcast":
        return row + arg
    raise AssertionError(kind)


def dpp_reference(ctrl, src, old, row_mask=0xF, bank_mask=0xF, bound_ctrl=False, active=None):
    out = old.clone()
    for w in range(0, N, 64):
        for lane in range(64):
            on = active is None or active[lane]
            if not on or not (row_mask >> (lane // 16) & 1) or not (bank_mask >> (lane % 16 // 4) & 1):
                continue
            s = source_lane(ctrl, lane)
            if s is None or (active is not None and not active[s]):
                if bound_ctrl:
                    out[w + lane] = 0
                continue
            out[w + lane] = src[w + s]
    return out


def ctrl_text(ctrl):
    kind, arg = ctrl
    if kind == "quad_perm":
        return f"quad_perm:[{','.join(map(str, arg))}]"
    return kind if arg is None else f"{kind}:{arg}"


CTRLS = [("quad_perm", (3, 2, 1, 0)), ("quad_perm", (1, 1, 0, 2)), ("row_shl", 1), ("row_shl", 15), ("row_shr", 3),
         ("row_ror", 8), ("row_ror", 1), ("wave_shl", 1), ("wave_rol", 1), ("wave_shr", 1), ("wave_ror", 1),
         ("row_mirror", None), ("row_half_mirror", None), ("row_bcast", 15), ("row_bcast", 31),
         ("row_newbcast", 5)]


@pytest.mark.parametrize("ctrl", CTRLS, ids=ctrl_text)
def test_dpp_controls_with_bound_ctrl_and_masks(ctrl):
    text = ctrl_text(ctrl)
    body = f"""v_mov_b32 v20, v11
               s_nop 1
               v_mov_b32_dpp v20, v10 {text} row_mask:0xf bank_mask:0xf
               v_mov_b32 v21, v11
               s_nop 1
               v_mov_b32_dpp v21, v10 {text} row_mask:0xf bank_mask:0xf bound_ctrl:1
               v_mov_b32 v22, v11
               s_nop 1
               v_mov_b32_dpp v22, v10 {text} row_mask:0xa bank_mask:0x5"""
    outs = run_lanes(body, [A, OLD], n_out=3, block=64)
    assert torch.equal(outs[0], dpp_reference(ctrl, A, OLD))
    assert torch.equal(outs[1], dpp_reference(ctrl, A, OLD, bound_ctrl=True))
    assert torch.equal(outs[2], dpp_reference(ctrl, A, OLD, row_mask=0xA, bank_mask=0x5))


def test_row_newbcast_is_what_llc_emits_for_dpp_control_0x150_plus_n():
    """llc (the oracle for the encoding) spells llvm.amdgcn.update.dpp's dpp_ctrl 0x150 + 9 (345)
    row_newbcast:9 on gfx942; every lane then holds lane 9 of its row (source_lane)."""
    src = torch.randint(-2**31, 2**31 - 1, (256,), dtype=torch.int32, generator=gen)
    body = "%y0 = call i32 @llvm.amdgcn.update.dpp.i32(i32 0, i32 %x0, i32 345, i32 15, i32 15, i1 false)"
    decl = "\ndeclare i32 @llvm.amdgcn.update.dpp.i32(i32, i32, i32, i32, i32, i1)\n"
    mod = llc_module(lane_ir(body, 1, 1) + decl, "gfx942")
    out = torch.zeros(256, dtype=torch.int32)
    mod.launch("k", grid=(1, 1, 1), block=(256, 1, 1), args=[src, out])
    assert torch.equal(out, torch.tensor([src[w + source_lane(("row_newbcast", 9), lane)]
                                          for w in range(0, 256, 64) for lane in range(64)]))


def test_dpp_reads_of_exec_disabled_lanes_are_invalid():
    active = [lane % 3 != 0 for lane in range(64)]
    bits = sum(1 << i for i, on in enumerate(active) if on)
    body = f"""v_mov_b32 v20, v11
               v_mov_b32 v21, v11
               s_mov_b32 s96, {bits & 0xFFFFFFFF:#x}
               s_mov_b32 s97, {bits >> 32:#x}
               s_mov_b64 s[98:99], exec
               s_mov_b64 exec, s[96:97]
               v_mov_b32_dpp v20, v10 row_shr:1 row_mask:0xf bank_mask:0xf
               v_mov_b32_dpp v21, v10 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
               s_mov_b64 exec, s[98:99]"""
    outs = run_lanes(body, [A, OLD], n_out=2, block=64)
    assert torch.equal(outs[0], dpp_reference(("row_shr", 1), A, OLD, active=active))
    assert torch.equal(outs[1], dpp_reference(("row_shr", 1), A, OLD, bound_ctrl=True, active=active))


def test_dpp_on_arithmetic_combines_the_moved_src0_with_src1():
    """A row reduction step as LLVM writes it: v_add_f32_dpp with row_shr and src1 from the lane itself."""
    x, y = torch.randn(N, generator=gen), torch.randn(N, generator=gen)
    body = """v_mov_b32 v20, v11
              s_nop 1
              v_add_f32_dpp v20, v10, v11 row_shr:2 row_mask:0xf bank_mask:0xf bound_ctrl:1
              v_mov_b32 v21, v11
              s_nop 1
              v_add_u32_dpp v21, v10, v11 quad_perm:[2,3,0,1] row_mask:0xf bank_mask:0xf"""
    outs = run_lanes(body, [x, y], n_out=2, block=64)
    moved = dpp_reference(("row_shr", 2), x.view(torch.int32), torch.zeros(N, dtype=torch.int32), bound_ctrl=True)
    assert torch.equal(outs[0].view(torch.float32), moved.view(torch.float32) + y)
    moved = dpp_reference(("quad_perm", (2, 3, 0, 1)), x.view(torch.int32), y.view(torch.int32))
    assert torch.equal(outs[1], moved + y.view(torch.int32))


def _field(v, sel, sext=False):
    shift, width = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8), "WORD_0": (0, 16),
                    "WORD_1": (16, 16), "DWORD": (0, 32)}[sel]
    f = (v.long() >> shift) & ((1 << width) - 1)
    if sext and width < 32:
        f = torch.where(f >= 1 << (width - 1), f - (1 << width), f)
    return f


def test_sdwa_source_selects_sext_and_destination_modes():
    B = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)
    body = """v_mov_b32 v20, v12
              v_and_b32_sdwa v20, v10, v11 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_3 src1_sel:DWORD
              v_mov_b32 v21, v12
              v_add_u32_sdwa v21, sext(v10), v11 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_1 src1_sel:WORD_0
              v_mov_b32 v22, v12
              v_add_u32_sdwa v22, v10, v11 dst_sel:BYTE_1 dst_unused:UNUSED_SEXT src0_sel:WORD_1 src1_sel:BYTE_2
              v_mov_b32 v23, v12
              v_sub_u32_sdwa v23, v10, v11 dst_sel:WORD_0 dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:BYTE_1"""
    outs = run_lanes(body, [A, B, OLD], n_out=4, block=64)
    M = 0xFFFFFFFF
    assert torch.equal(outs[0].long() & M, _field(A, "BYTE_3") & (B.long() & M))
    r = (_field(A, "BYTE_1", True) + _field(B, "WORD_0")) & 0xFFFF
    assert torch.equal(outs[1].long() & M, (r << 16) | (OLD.long() & 0xFFFF))
    r = (_field(A, "WORD_1") + _field(B, "BYTE_2")) & 0xFF
    r = torch.where(r >= 128, r - 256, r)  # UNUSED_SEXT: the byte's sign fills the bits above it
    assert torch.equal(outs[2].long() & M, (r << 8) & M)
    assert torch.equal(outs[3].long() & M, (_field(A, "BYTE_0") - _field(B, "BYTE_1")) & 0xFFFF)


def test_sdwa_compare_and_f16_word_select():
    B = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)
    h = torch.randn(2 * N, generator=gen).half().view(torch.int32)
    body = """v_cmp_gt_u32_sdwa vcc, v10, v11 src0_sel:WORD_1 src1_sel:WORD_0
              s_nop 1
              v_cndmask_b32 v20, 0, 1, vcc
              v_mov_b32 v21, v12
              v_add_f16_sdwa v21, v12, v12 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:WORD_1 src1_sel:WORD_0"""
    outs = run_lanes(body, [A, B, h], n_out=2, block=64)
    assert torch.equal(outs[0].bool(), _field(A, "WORD_1") > _field(B, "WORD_0"))
    halves = h.view(torch.float16).view(N, 2)
    s = (halves[:, 1] + halves[:, 0]).view(torch.int16).long() & 0xFFFF
    assert torch.equal(outs[1].long() & 0xFFFFFFFF, (s << 16) | (h.long() & 0xFFFF))


@pytest.mark.parametrize("row", [16, 32])
def test_permlane_swap_trades_odd_rows_of_vdst_with_even_rows_of_vsrc(row):
    B = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)
    body = f"""v_mov_b32 v20, v10
               v_mov_b32 v21, v11
               s_nop 1
               v_permlane{row}_swap_b32 v20, v21"""
    outs = run_lanes(body, [A, B], n_out=2, block=64, arch="gfx950")
    ra, rb = A.clone(), B.clone()
    for w in range(0, N, 64):
        for lane in range(64):
            if lane // row % 2 == 1:
                ra[w + lane], rb[w + lane - row] = B[w + lane - row], A[w + lane]
    assert torch.equal(outs[0], ra) and torch.equal(outs[1], rb)


def test_permlane_swap_with_bound_ctrl_runs_with_exec_full_and_is_refused_otherwise():
    """fi / bound_ctrl only decide what an inactive partner lane gives (HipKittens' attention sets bound_ctrl)."""
    from tilegcn.errors import EmulatorError

    B = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)
    swap = """v_mov_b32 v20, v10
              v_mov_b32 v21, v11
              s_nop 1
              v_permlane32_swap_b32_e64 v20, v21 bound_ctrl:1"""
    plain = run_lanes(swap.replace(" bound_ctrl:1", ""), [A, B], n_out=2, block=64, arch="gfx950")
    assert all(torch.equal(x, y) for x, y in zip(run_lanes(swap, [A, B], n_out=2, block=64, arch="gfx950"), plain))
    partial = swap.replace("s_nop 1", "s_mov_b32 exec_lo, 0xffff\ns_nop 1")
    with pytest.raises(EmulatorError, match="fi / bound_ctrl and lanes off in EXEC"):
        run_lanes(partial, [A, B], n_out=2, block=64, arch="gfx950")


def _swizzle_reference(offset, src, active):
    out = torch.zeros_like(src)
    for w in range(0, N, 64):
        for i in range(64):
            if offset & 0x8000:
                s = (i & ~3) | ((offset >> (2 * (i & 3))) & 3)
            else:
                s = (i & 0x20) | ((((i & 0x1F) & (offset & 0x1F)) | ((offset >> 5) & 0x1F)) ^ ((offset >> 10) & 0x1F))
            out[w + i] = src[w + s] if active[s] else 0
    return out


def _exec_body(active, inner):
    bits = sum(1 << i for i, on in enumerate(active) if on)
    return f"""s_mov_b32 s96, {bits & 0xFFFFFFFF:#x}
               s_mov_b32 s97, {bits >> 32:#x}
               s_mov_b64 s[98:99], exec
               s_mov_b64 exec, s[96:97]
               {inner}
               s_waitcnt lgkmcnt(0)
               s_mov_b64 exec, s[98:99]"""


def test_ds_bpermute_and_permute_against_the_guides_pseudocode():
    active = [i % 5 != 1 for i in range(64)]
    addr = torch.randint(0, 1 << 12, (N,), dtype=torch.int32, generator=gen)
    body = "v_mov_b32 v20, v12\nv_mov_b32 v21, v12\n" + _exec_body(active, """ds_bpermute_b32 v20, v10, v11 offset:8
                                                                          ds_permute_b32 v21, v10, v11""")
    outs = run_lanes(body, [addr, A, OLD], n_out=2, block=64)
    back, fwd = OLD.clone(), OLD.clone()
    for w in range(0, N, 64):
        tmp = [0] * 64
        for i in range(64):  # permute: active senders, the highest lane wins
            if active[i]:
                tmp[(int(addr[w + i]) // 4) % 64] = int(A[w + i])
        for i in range(64):
            if active[i]:
                s = ((int(addr[w + i]) + 8) // 4) % 64
                back[w + i] = int(A[w + s]) if active[s] else 0
                fwd[w + i] = tmp[i]
    assert torch.equal(outs[0], back) and torch.equal(outs[1], fwd)


@pytest.mark.parametrize("pattern", ["swizzle(QUAD_PERM,3,0,2,1)", "swizzle(SWAP,4)", "swizzle(REVERSE,16)",
                                     "swizzle(BROADCAST,8,5)", 'swizzle(BITMASK_PERM,"01pip")'])
def test_ds_swizzle_modes(pattern):
    from asm.emukit import build, lane_kernel
    active = [i % 7 != 3 for i in range(64)]
    body = _exec_body(active, f"ds_swizzle_b32 v20, v10 offset:{pattern}")
    mod = build(lane_kernel(body, 1, 1, block=64), "gfx942")
    (ins,) = [i for i in mod.instrs if i.base == "ds_swizzle_b32"]
    out = torch.zeros(N, dtype=torch.int32)
    mod.launch("k", (N // 64, 1, 1), (64, 1, 1), [A, out])
    ref = _swizzle_reference(ins.words[0] & 0xFFFF, A, active)  # the encoded offset llvm-mc chose for the macro
    ref = torch.where(torch.tensor(active * (N // 64)), ref, 0)  # inactive lanes keep the zero-filled output
    assert torch.equal(out, ref)


@pytest.mark.parametrize("bits", [16, 8])
def test_ds_read_b64_tr_gives_lane_j_column_j_of_the_tile(bits):
    """16 lanes read the rows of a (64/bits) x 16 tile of `bits`-bit elements in 8-byte chunks (lane
    k*(16/E)+c reads chunk c of row k); after ds_read_b64_tr_b{bits} lane j holds column j."""
    e = 64 // bits
    dt = torch.int16 if bits == 16 else torch.int8
    tile = torch.randint(-100, 100, (4, e, 16), dtype=dt, generator=gen)  # per 16-lane group: E rows of 16
    words = tile.contiguous().view(torch.int32).view(64, 2)  # 512 bytes: 8 per lane, group g at byte 128g
    lane = torch.arange(64)
    addr = ((lane // 16) * 128 + lane % 16 * 8).to(torch.int32)  # lane l of a group reads chunk l
    body = f"""v_lshlrev_b32 v3, 3, v1
               ds_write_b64 v3, v[10:11]
               s_waitcnt lgkmcnt(0)
               s_barrier
               ds_read_b64_tr_b{bits} v[20:21], v12
               s_waitcnt lgkmcnt(0)"""
    outs = run_lanes(body, [words[:, 0], words[:, 1], addr], n_out=2, block=64, arch="gfx950", lds=512)
    got = torch.stack([outs[0], outs[1]], 1).contiguous().view(dt).view(4, 16, e)
    assert torch.equal(got, tile.transpose(1, 2))
