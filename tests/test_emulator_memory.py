"""Buffer, global, LDS (DS) and LDS-DMA instructions on the emulated device."""
import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import module, srd  # noqa: E402
from tilegcn.errors import EmulatorError  # noqa: E402

PROLOGUE = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              s_load_dwordx2 s[6:7], s[0:1], 0x8
              v_and_b32 v1, 0x3ff, v0
              v_lshlrev_b32 v2, 2, v1
              s_waitcnt lgkmcnt(0)"""


def two_buffers(body, src_bytes, dst_bytes=4096, arch="gfx942", lds=0, **kw):
    """Kernel with s[8:11] = V#(src, NUM_RECORDS=src_bytes), s[12:15] = V#(dst); v1 = lane, v2 = 4 * lane."""
    text = "\n".join([PROLOGUE, srd(8, 4, src_bytes), srd(12, 6, dst_bytes), body, "s_endpgm"])
    kw.setdefault("sgprs", 32)
    kw.setdefault("vgprs", 32)
    return module(text, arch=arch, args=("ptr", "ptr"), lds=lds, **kw)


def test_buffer_out_of_range_loads_read_zero_and_stores_are_dropped():
    """NUM_RECORDS = 100 bytes: dwords at offsets >= 100 load 0; dwordx4 lanes are checked per dword."""
    body = """buffer_load_dword v3, v2, s[8:11], 0 offen offset:4
              v_lshlrev_b32 v4, 4, v1
              buffer_load_dwordx4 v[8:11], v4, s[8:11], 0 offen
              s_waitcnt vmcnt(0)
              buffer_store_dword v3, v2, s[12:15], 0 offen
              s_mov_b32 s14, 40
              buffer_store_dword v3, v2, s[12:15], 0 offen offset:256
              s_mov_b32 s14, 4096
              v_add_u32 v5, 0x200, v4
              buffer_store_dwordx4 v[8:11], v5, s[12:15], 0 offen"""
    mod = two_buffers(body, 100)
    src = torch.arange(1, 257, dtype=torch.int32)  # 1024 bytes mapped, only 100 in range
    dst = torch.full((1024,), -7, dtype=torch.int32)
    mod.launch("k", (1, 1, 1), (64, 1, 1), [src, dst])
    lane = torch.arange(64)
    expect = torch.where(4 * lane + 4 + 4 <= 100, src[lane + 1], 0)
    assert torch.equal(dst[:64], expect)
    # second store: NUM_RECORDS = 40 -> only offsets 256 + 4*lane + 4 <= 40 ... none in range: all dropped
    assert torch.equal(dst[64:128], torch.full((64,), -7, dtype=torch.int32))
    x4 = dst[128:384].view(64, 4)
    d = torch.arange(4)
    expect4 = torch.where(16 * lane.view(-1, 1) + 4 * (d + 1) <= 100, src[(4 * lane.view(-1, 1) + d)], 0)
    assert torch.equal(x4, expect4)


def test_soffset_and_immediate_offset_form_the_address():
    body = """s_mov_b32 s16, 64
              buffer_load_dword v3, v2, s[8:11], s16 offen offset:8
              buffer_load_dword v4, off, s[8:11], s16 offset:12
              s_waitcnt vmcnt(0)
              v_add_u32 v3, v3, v4
              buffer_store_dword v3, v2, s[12:15], 0 offen"""
    src = torch.arange(512, dtype=torch.int32)
    dst = torch.zeros(64, dtype=torch.int32)
    two_buffers(body, 2048).launch("k", (1, 1, 1), (64, 1, 1), [src, dst])
    assert torch.equal(dst, src[16 + 2 + torch.arange(64)] + src[16 + 3])


def test_subdword_and_d16_loads_and_stores():
    body = """buffer_load_ubyte v3, v1, s[8:11], 0 offen
              buffer_load_sbyte v4, v1, s[8:11], 0 offen
              v_lshlrev_b32 v5, 1, v1
              buffer_load_ushort v6, v5, s[8:11], 0 offen
              buffer_load_sshort v7, v5, s[8:11], 0 offen
              v_mov_b32 v8, 0x11112222
              v_mov_b32 v9, 0x33334444
              buffer_load_short_d16 v8, v5, s[8:11], 0 offen
              buffer_load_short_d16_hi v9, v5, s[8:11], 0 offen
              s_waitcnt vmcnt(0)
              buffer_store_dword v3, v2, s[12:15], 0 offen
              buffer_store_dword v4, v2, s[12:15], 0 offen offset:256
              buffer_store_dword v6, v2, s[12:15], 0 offen offset:512
              buffer_store_dword v7, v2, s[12:15], 0 offen offset:768
              buffer_store_dword v8, v2, s[12:15], 0 offen offset:1024
              buffer_store_dword v9, v2, s[12:15], 0 offen offset:1280
              v_add_u32 v10, 0x600, v1
              buffer_store_byte v9, v10, s[12:15], 0 offen
              v_add_u32 v10, 0x700, v5
              buffer_store_short_d16_hi v8, v10, s[12:15], 0 offen"""
    raw = torch.randint(0, 256, (256,), dtype=torch.uint8)
    dst = torch.zeros(1024, dtype=torch.int32)
    two_buffers(body, 256).launch("k", (1, 1, 1), (64, 1, 1), [raw, dst])
    b = raw[:64].to(torch.int32)
    h = raw[:128].view(torch.int16)[:64].to(torch.int32)
    hu = h & 0xFFFF
    assert torch.equal(dst[:64], b)
    assert torch.equal(dst[64:128], raw[:64].view(torch.int8).to(torch.int32))
    assert torch.equal(dst[128:192], hu) and torch.equal(dst[192:256], h)
    assert torch.equal(dst[256:320], hu | 0x11110000)
    assert torch.equal(dst[320:384], (hu << 16) | 0x4444)
    assert torch.equal(dst.view(torch.uint8)[0x600:0x640], torch.full((64,), 0x44, dtype=torch.uint8))
    assert torch.equal(dst.view(torch.int16)[0x380:0x3C0].to(torch.int32) & 0xFFFF, torch.full((64,), 0x1111))


def test_global_loads_and_stores_with_vaddr_and_saddr():
    body = """v_mov_b32 v10, s4
              v_mov_b32 v11, s5
              v_lshlrev_b32 v12, 3, v1
              v_add_co_u32 v10, vcc, v10, v12
              s_nop 1
              v_addc_co_u32 v11, vcc, 0, v11, vcc
              global_load_dwordx2 v[4:5], v[10:11], off offset:8
              v_add_u32 v7, 4, v2
              global_load_dword v6, v7, s[4:5] offset:-4
              s_waitcnt vmcnt(0)
              v_add_u32 v4, v4, v6
              global_store_dword v2, v4, s[6:7]
              global_store_dword v2, v5, s[6:7] offset:256"""
    src = torch.arange(1000, 1256, dtype=torch.int32)
    dst = torch.zeros(128, dtype=torch.int32)
    mod = two_buffers("\n".join(l for l in body.splitlines()), 1024)
    mod.launch("k", (1, 1, 1), (64, 1, 1), [src[4:], dst])  # a tensor view: data_ptr() is 16 bytes in
    lane = torch.arange(64)
    s = src[4:]
    assert torch.equal(dst[:64], s[2 * lane + 2] + s[lane])
    assert torch.equal(dst[64:], s[2 * lane + 3])


def test_global_access_outside_every_tensor_faults():
    body = """v_mov_b32 v3, 0
              global_load_dword v4, v3, s[4:5] offset:-8
              s_waitcnt vmcnt(0)"""
    with pytest.raises(EmulatorError, match=r"global_load_dword v4, v3, s\[4:5\] offset:-8.*lane 0: memory fault"):
        two_buffers(body, 64).launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(16), torch.zeros(16)])


def test_ds_read_write_forms():
    body = """v_lshlrev_b32 v3, 3, v1
              v_mov_b32 v4, v1
              v_add_u32 v5, 0x1000, v1
              ds_write2_b32 v3, v4, v5 offset1:1
              v_lshlrev_b32 v6, 4, v1
              v_add_u32 v16, 100, v1
              v_add_u32 v17, 200, v1
              v_add_u32 v18, 300, v1
              v_add_u32 v19, 400, v1
              ds_write_b128 v6, v[16:19] offset:1024
              v_add_u32 v11, 0x800, v1
              ds_write_b8 v11, v5
              v_lshlrev_b32 v12, 1, v1
              ds_write_b16 v12, v5 offset:2304
              s_waitcnt lgkmcnt(0)
              ds_read_b64 v[14:15], v3
              ds_read2_b32 v[16:17], v3 offset0:1 offset1:2
              ds_read_b128 v[20:23], v6 offset:1024
              ds_read_u8 v24, v11
              ds_read_i16 v25, v12 offset:2304
              ds_read2st64_b32 v[26:27], v3 offset1:2
              s_waitcnt lgkmcnt(0)
              buffer_store_dwordx2 v[14:15], v3, s[12:15], 0 offen
              buffer_store_dwordx2 v[16:17], v3, s[12:15], 0 offen offset:512
              v_add_u32 v6, 0x400, v6
              buffer_store_dwordx4 v[20:23], v6, s[12:15], 0 offen
              buffer_store_dword v24, v2, s[12:15], 0 offen offset:2048
              buffer_store_dword v25, v2, s[12:15], 0 offen offset:2304
              buffer_store_dwordx2 v[26:27], v3, s[12:15], 0 offen offset:2560"""
    dst = torch.zeros(1024, dtype=torch.int32)
    mod = two_buffers(body, 0, lds=4096)
    stats = mod.launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(4), dst])
    lane = torch.arange(64, dtype=torch.int32)
    lds = torch.stack([lane, lane + 0x1000], 1).reshape(-1)  # dwords 0..127
    assert torch.equal(dst[:128], lds)
    ext = torch.cat([lds, torch.zeros(1, dtype=torch.int32)])  # dword 128 was never written: 0
    assert torch.equal(dst[128:256].view(64, 2), torch.stack([ext[2 * lane + 1], ext[2 * lane + 2]], 1))
    assert torch.equal(dst[256:512].view(64, 4), torch.stack([lane + 100, lane + 200, lane + 300, lane + 400], 1))
    assert torch.equal(dst[512:576], (lane + 0x1000) & 0xFF)
    assert torch.equal(dst[576:640], (lane + 0x1000).to(torch.int16).to(torch.int32))
    st64 = dst[640:768].view(64, 2)
    assert torch.equal(st64[:, 0], lds[2 * lane])
    assert stats.bytes_vgpr_to_lds == 64 * (8 + 16 + 1 + 2)
    assert stats.bytes_lds_to_vgpr == 64 * (8 + 8 + 16 + 1 + 2 + 8)


def test_lds_dma_address_is_m0_plus_offset_plus_lane_stride():
    """buffer_load_dword ... lds: lane l's dword lands at LDS M0 + inst_offset + 4*l; out-of-range lanes
    write zeros; reading it back with ds_read after s_waitcnt vmcnt(0) sees the data."""
    body = """s_mov_b32 m0, 0x100
              v_lshlrev_b32 v3, 3, v1
              s_nop 0
              buffer_load_dword v3, s[8:11], 0 offen offset:8 lds
              s_waitcnt vmcnt(0)
              v_lshlrev_b32 v4, 2, v1
              ds_read_b32 v5, v4 offset:264
              s_waitcnt lgkmcnt(0)
              buffer_store_dword v5, v2, s[12:15], 0 offen"""
    src = torch.arange(10000, 10512, dtype=torch.int32)
    dst = torch.zeros(64, dtype=torch.int32)
    stats = two_buffers(body, 400, lds=1024).launch("k", (1, 1, 1), (64, 1, 1), [src, dst])
    lane = torch.arange(64)
    expect = torch.where(8 * lane + 8 + 4 <= 400, src[2 * lane + 2], 0)
    assert torch.equal(dst, expect)
    assert stats.bytes_global_to_lds == 4 * int((8 * lane + 8 + 4 <= 400).sum())


def test_lds_dma_dwordx4_legal_on_gfx950_only():
    body = """s_mov_b32 m0, 0
              v_lshlrev_b32 v3, 4, v1
              s_nop 0
              buffer_load_dwordx4 v3, s[8:11], 0 offen lds
              s_waitcnt vmcnt(0)
              v_lshlrev_b32 v4, 4, v1
              ds_read_b128 v[8:11], v4
              s_waitcnt lgkmcnt(0)
              buffer_store_dwordx4 v[8:11], v4, s[12:15], 0 offen"""
    src = torch.arange(256, dtype=torch.int32)
    dst = torch.zeros(256, dtype=torch.int32)
    two_buffers(body, 1024, arch="gfx950", lds=1024).launch("k", (1, 1, 1), (64, 1, 1), [src, dst])
    assert torch.equal(dst, src)
    # decoded for gfx942 the same bytes are not an instruction gfx942 has
    mod = two_buffers(body, 1024, arch="gfx950", lds=1024, run_as="gfx942")
    with pytest.raises(EmulatorError, match="buffer_load_dwordx4|decode|unknown"):
        mod.launch("k", (1, 1, 1), (64, 1, 1), [src, dst])


def test_lds_access_beyond_the_descriptor_size_is_an_error():
    body = """v_lshlrev_b32 v3, 4, v1
              ds_write_b32 v3, v1
              s_waitcnt lgkmcnt(0)"""
    with pytest.raises(EmulatorError, match=r"ds_write_b32 v3, v1.*lane 16: LDS access \[256, 260\) is outside"):
        two_buffers(body, 0, lds=256).launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(4), torch.zeros(4)])


def test_bank_conflicts_follow_the_documented_model():
    """32 banks (gfx942): stride-1 dwords -> 0; stride 64 dwords -> every lane of a 32-lane phase in bank 0
    (31 extra cycles per phase, 2 phases); all lanes on one dword -> broadcast, 0; b128 with 16-byte stride:
    phases of 8 lanes cover 32 distinct banks -> 0. 64 banks (gfx950): one 64-lane phase -> 63."""
    body = """v_lshlrev_b32 v3, 8, v1
              v_mov_b32 v4, 0
              v_lshlrev_b32 v5, 4, v1
              ds_read_b32 v6, v2
              ds_read_b32 v7, v3
              ds_read_b32 v8, v4
              ds_read_b128 v[12:15], v5
              s_waitcnt lgkmcnt(0)"""
    stats = two_buffers(body, 0, lds=16384).launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(4), torch.zeros(4)])
    assert stats.lds_bank_conflicts == 2 * 31
    assert stats.lds_bank_conflicts_by_mnemonic == {"ds_read_b32": 62}
    stats = two_buffers(body, 0, arch="gfx950", lds=16384).launch("k", (1, 1, 1), (64, 1, 1),
                                                                 [torch.zeros(4), torch.zeros(4)])
    assert stats.lds_bank_conflicts == 63


def test_buffer_range_check_refuses_to_guess_soffsets_part():
    """Whether soffset counts in the raw-buffer range check is not specified (ops_mem docstring): an access
    that is in range under one reading and out of range under the other is an error, not a guess; one the
    readings agree on runs."""
    from asm.emukit import run_lanes, srd
    from tilegcn.errors import EmulatorError
    off = (torch.arange(64, dtype=torch.int32) * 4) % 64
    body = f"""{srd(96, 6, 128)}
               s_mov_b32 s95, {{so}}
               buffer_load_dword v20, v10, s[96:99], s95 offen
               s_waitcnt vmcnt(0)"""
    data = torch.arange(64, dtype=torch.int32)
    out = run_lanes(body.format(so=16), [off, data], block=64)[0]  # offsets < 64, + 16 < 128: both readings agree
    assert torch.equal(out, off // 4 + 4)
    with pytest.raises(EmulatorError, match="soffset"):
        run_lanes(body.format(so=100), [off, data], block=64)


# -- issue 18: addresses a GPU would fault on -------------------------------------------------------------------
@pytest.mark.parametrize("op", ["global_store_dword v[10:11], v1, off", "global_load_dword v3, v[10:11], off",
                                "flat_store_dword v[10:11], v1"])
def test_an_address_with_bit_63_set_faults(op):
    """dst's own address with bit 63 set is no mapped memory: a fault naming the instruction and the address
    (a load of 0 or a dropped store would hide the kernel's bug)."""
    body = f"""v_mov_b32 v10, s6
               s_or_b32 s7, s7, 0x80000000
               v_mov_b32 v11, s7
               {op}
               s_waitcnt vmcnt(0)"""
    dst = torch.zeros(64, dtype=torch.int32)
    addr = rf"0x8{dst.data_ptr():015x}"
    with pytest.raises(EmulatorError, match=rf"{op.split()[0]} .*memory fault: (store to|access to) {addr}"):
        two_buffers(body, 64).launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32), dst])
    assert not dst.any()


def test_the_gaps_between_the_rows_of_a_strided_view_are_not_mapped():
    """y = x[:, :32] of a 64-wide x maps y's elements only: an access to x[:, 32:] (byte 128 of a row) faults
    like any address outside the arguments (a buffer access too, where NUM_RECORDS puts it in range), and x
    keeps its bytes; a store to row 1 of y lands. A buffer access that NUM_RECORDS puts out of range reads 0
    there without a fault, as on hardware."""
    x = torch.arange(4 * 64, dtype=torch.int32).view(4, 64)
    before = x.clone()
    y = x[:, :32]
    row1 = """v_mov_b32 v3, 7
              global_store_dword v2, v3, s[6:7] offset:256
              s_waitcnt vmcnt(0)"""
    two_buffers(row1, 64).launch("k", (1, 1, 1), (32, 1, 1), [torch.zeros(64), y])
    assert torch.equal(x[1, :32], torch.full((32,), 7, dtype=torch.int32))
    x[1, :32] = before[1, :32]
    for op in ("global_store_dword v2, v1, s[6:7] offset:128", "global_load_dword v3, v2, s[6:7] offset:128",
               "buffer_store_dword v1, v2, s[12:15], 0 offen offset:128"):  # in range of NUM_RECORDS 4096
        with pytest.raises(EmulatorError, match=rf"{re.escape(op)}.*lane 0: memory fault: .*between the elements"):
            two_buffers(f"{op}\ns_waitcnt vmcnt(0)", 64).launch("k", (1, 1, 1), (32, 1, 1), [torch.zeros(64), y])
        assert torch.equal(x, before)
    # NUM_RECORDS 128: offsets 128.. (the gap) are out of range: 0 is read, nothing faults
    gap_read = """buffer_load_dword v3, v2, s[12:15], 0 offen offset:128
                  s_waitcnt vmcnt(0)
                  buffer_store_dword v3, v2, s[12:15], 0 offen
                  s_waitcnt vmcnt(0)"""
    two_buffers(gap_read, 64, dst_bytes=128).launch("k", (1, 1, 1), (32, 1, 1), [torch.zeros(64), y])
    assert not x[0, :32].any() and torch.equal(x[1:], before[1:])


def test_swizzle_enabled_resource_addresses_a_raw_access_linearly_and_refuses_an_indexed_one():
    """HipKittens' V#: SWIZZLE_ENABLE, cache swizzle and a 256-byte stride (word 1 = 0xc100xxxx); its raw offen
    loads read base + offset (docs/isa-notes.md); an idxen access would need the ISA's AoS swizzle: refused."""
    raw = """s_or_b32 s9, s9, 0xc1000000
             buffer_load_dword v3, v2, s[8:11], 0 offen
             s_waitcnt vmcnt(0)
             buffer_store_dword v3, v2, s[12:15], 0 offen"""
    src = torch.arange(256, dtype=torch.int32)
    dst = torch.zeros(64, dtype=torch.int32)
    two_buffers(raw, 1024).launch("k", (1, 1, 1), (64, 1, 1), [src, dst])
    assert torch.equal(dst, src[:64])
    indexed = """s_or_b32 s9, s9, 0xc1000000
                 buffer_load_dword v3, v1, s[8:11], 0 idxen
                 s_waitcnt vmcnt(0)"""
    with pytest.raises(EmulatorError, match="SWIZZLE_ENABLE is not modelled for an indexed"):
        two_buffers(indexed, 1024).launch("k", (1, 1, 1), (64, 1, 1), [src, dst])
