"""Loading code objects (ELF, metadata note, kernel descriptors), the device interface and launch statistics."""
import struct
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import kernel_asm, module, srd  # noqa: E402
from tilegcn.errors import DeviceError  # noqa: E402
from tilegcn.perfmodel import estimate  # noqa: E402
from tilegcn.runtime import codeobject, emulator  # noqa: E402
from tilegcn.runtime.emulator import EmulatorDevice  # noqa: E402
from tilegcn.toolchain import assemble  # noqa: E402

COPY = """s_load_dwordx2 s[4:5], s[0:1], 0x0
          s_load_dwordx2 s[6:7], s[0:1], 0x8
          v_and_b32 v1, 0x3ff, v0
          s_lshl_b32 s3, s2, 8
          v_add_u32 v1, s3, v1
          v_lshlrev_b32 v2, 2, v1
          s_waitcnt lgkmcnt(0)
          """ + srd(8, 4, "0x7fffffff") + "\n" + srd(12, 6, "0x7fffffff") + """
          buffer_load_dword v3, v2, s[8:11], 0 offen
          s_waitcnt vmcnt(0)
          v_add_f32 v3, 1.0, v3
          buffer_store_dword v3, v2, s[12:15], 0 offen
          s_endpgm"""


def test_msgpack_decoder_reads_every_type_the_metadata_uses():
    blob = bytes([0x86,  # map of 6
                  0xA1, ord("a"), 0x93, 0x01, 0xCC, 0xFF, 0xD0, 0x80,  # "a": [1, 255, -128]
                  0xA1, ord("b"), 0xC3,  # "b": true
                  0xA1, ord("c"), 0xCB]) + struct.pack(">d", 2.5) + bytes(
                 [0xA1, ord("d"), 0xD9, 3]) + b"xyz" + bytes(
                 [0xA1, ord("e"), 0xCD, 0x12, 0x34,  # uint16
                  0xA1, ord("f"), 0xDE, 0x00, 0x01, 0xA1, ord("g"), 0xC0])  # map16 {"g": nil}
    assert codeobject.msgpack_decode(blob) == {"a": [1, 255, -128], "b": True, "c": 2.5, "d": "xyz",
                                              "e": 0x1234, "f": {"g": None}}


def test_parse_reads_metadata_descriptor_and_entry():
    text = kernel_asm(COPY, args=("ptr", "ptr"), vgprs=40, accum=24, sgprs=24, lds=1536, wg_ids="xz",
                      workitem=1, name="copy")
    hsaco = assemble(text, "gfx942")
    co = codeobject.parse(hsaco)
    assert co.arch == "gfx942" and co.metadata["amdhsa.version"] == [1, 2]
    k = co.kernels["copy"]
    assert k.metadata[".kernarg_segment_size"] == 16 and [a[".offset"] for a in k.metadata[".args"]] == [0, 8]
    kd = k.descriptor
    assert kd.group_segment_fixed_size == 1536
    assert kd.accum_offset == 24 and kd.vgpr_count == 40 and kd.agpr_count == 16 and kd.arch_vgpr_count == 24
    assert kd.enable_sgpr_kernarg_segment_ptr and kd.user_sgpr_count == 2
    assert kd.enable_workgroup_id == (True, False, True) and kd.workitem_id_mode == 1
    assert kd.system_sgpr_layout() == [("workgroup_id_x", 2), ("workgroup_id_z", 3)]
    assert k.entry_address == co.symbols["copy"].value == k.descriptor_address + kd.entry_offset
    assert co.read(k.entry_address, 8) == hsaco[co.sections[".text"].offset:][:8]


def test_arch_comes_from_the_target_or_the_elf_flags():
    text = kernel_asm("s_endpgm", arch="gfx950", args=())
    assert codeobject.parse(assemble(text, "gfx950")).arch == "gfx950"  # no amdhsa.target: EF_AMDGPU_MACH
    with_target = text.replace("amdhsa.version: [1, 2]", "amdhsa.version: [1, 2]\namdhsa.target: "
                                                          "amdgcn-amd-amdhsa--gfx950")
    co = codeobject.parse(assemble(with_target, "gfx950"))
    assert co.arch == "gfx950" and co.metadata["amdhsa.target"].endswith("gfx950")


def test_not_a_code_object_is_refused():
    with pytest.raises(DeviceError, match="ELF"):
        codeobject.parse(b"not an elf at all, just bytes" * 4)


def test_device_interface_load_path_and_bytes(tmp_path):
    hsaco = assemble(kernel_asm(COPY, args=("ptr", "ptr")), "gfx942")
    path = tmp_path / "k.hsaco"
    path.write_bytes(hsaco)
    x = torch.randn(1024)
    for mod in (EmulatorDevice().load(hsaco), emulator.load(path), emulator.load(str(path))):
        y = torch.zeros(1024)
        stats = mod.launch("k", grid=(4, 1, 1), block=(256, 1, 1), args=[x, y])
        assert torch.equal(y, x + 1) and mod.last_stats is stats
    with pytest.raises(DeviceError, match="no kernel 'nope'"):
        mod.launch("nope", (1, 1, 1), (64, 1, 1), [x, y])
    with pytest.raises(Exception, match="takes 2 arguments"):
        mod.launch("k", (1, 1, 1), (64, 1, 1), [x])


def test_launch_statistics_count_classes_lanes_and_bytes():
    mod = module(COPY, args=("ptr", "ptr"))
    x = torch.randn(512)
    y = torch.zeros(512)
    stats = mod.launch("k", grid=(2, 1, 1), block=(150, 1, 1), args=[x, y])  # 3 waves per workgroup (64, 64, 22)
    waves = 6
    assert stats.waves == waves and stats.workgroups == 2
    assert stats.instructions == {"smem": 2 * waves, "valu": 4 * waves, "salu": 9 * waves, "waitcnt": 2 * waves,
                                  "vmem": 2 * waves, "other": waves}
    assert stats.by_mnemonic["buffer_load_dword"] == waves
    assert stats.lane_instructions == 6 * 300  # 6 vector instructions, 300 active lanes
    assert stats.bytes_global_to_vgpr == 4 * 300 and stats.bytes_vgpr_to_global == 4 * 300
    assert stats.bytes_global_to_sgpr == 2 * 8 * waves
    touched = torch.zeros(512, dtype=torch.bool)
    touched[:150] = touched[256:406] = True
    assert torch.equal(y, torch.where(touched, x + 1, 0))


def test_divergent_groups_keep_their_own_outstanding_loads():
    """Waves split with loads in flight, one side issues more, then they reconverge and wait: each
    wave's queue is its own (vmcnt(1) retires the first load for the side that issued two)."""
    body = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              s_load_dwordx2 s[6:7], s[0:1], 0x8
              v_and_b32 v1, 0x3ff, v0
              v_lshlrev_b32 v2, 2, v1
              v_readfirstlane_b32 s20, v1
              s_waitcnt lgkmcnt(0)
              """ + srd(8, 4, 4096) + "\n" + srd(12, 6, 4096) + """
              buffer_load_dword v3, v2, s[8:11], 0 offen
              s_cmp_ge_u32 s20, 64
              s_cbranch_scc1 .Lskip
              buffer_load_dword v4, v2, s[8:11], 0 offen offset:1024
            .Lskip:
              s_waitcnt vmcnt(1)
              v_add_u32 v5, 7, v3
              buffer_store_dword v5, v2, s[12:15], 0 offen
              s_waitcnt vmcnt(0)
              s_endpgm"""
    mod = module(body, args=("ptr", "ptr"), sgprs=24, vgprs=8)
    src = torch.arange(1024, dtype=torch.int32)
    dst = torch.zeros(128, dtype=torch.int32)
    from tilegcn.errors import HazardError
    with pytest.raises(HazardError, match=r"wave 1 of workgroup \(0, 0, 0\): reads v3"):
        mod.launch("k", (1, 1, 1), (128, 1, 1), [src, dst])  # wave 1 issued one load: vmcnt(1) keeps it
    fixed = module(body.replace("s_waitcnt vmcnt(1)", "s_waitcnt vmcnt(1)\ns_cmp_ge_u32 s20, 64\n"
                                "s_cbranch_scc0 .Lgo\ns_waitcnt vmcnt(0)\n.Lgo:"), args=("ptr", "ptr"), sgprs=24,
                   vgprs=8)
    fixed.launch("k", (1, 1, 1), (128, 1, 1), [src, dst])
    assert torch.equal(dst, src[:128] + 7)


def test_d16_halves_into_one_register_from_one_queue_are_in_order():
    """buffer_load_short_d16 then _d16_hi into the same VGPR with one wait: the in-order vmcnt queue makes
    this well defined (not a hazard); a VALU write of that VGPR in between is one."""
    body = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              s_load_dwordx2 s[6:7], s[0:1], 0x8
              v_and_b32 v1, 0x3ff, v0
              v_lshlrev_b32 v2, 2, v1
              s_waitcnt lgkmcnt(0)
              """ + srd(8, 4, 4096) + "\n" + srd(12, 6, 4096) + """
              v_mov_b32 v3, 0
              buffer_load_short_d16 v3, v2, s[8:11], 0 offen
              buffer_load_short_d16_hi v3, v2, s[8:11], 0 offen offset:2
              {between}
              s_waitcnt vmcnt(0)
              buffer_store_dword v3, v2, s[12:15], 0 offen
              s_endpgm"""
    src = torch.arange(1024, dtype=torch.int32) * 0x10001 + 0x30004
    dst = torch.zeros(64, dtype=torch.int32)
    module(body.format(between=""), args=("ptr", "ptr"), sgprs=24, vgprs=8).launch(
        "k", (1, 1, 1), (64, 1, 1), [src, dst])
    assert torch.equal(dst, src[:64])
    from tilegcn.errors import HazardError
    with pytest.raises(HazardError, match="overwrites v3"):
        module(body.format(between="v_mov_b32 v3, 1"), args=("ptr", "ptr"), sgprs=24, vgprs=8).launch(
            "k", (1, 1, 1), (64, 1, 1), [src, dst])


def test_many_workgroups_run_in_chunks():
    mod = module(COPY, args=("ptr", "ptr"))
    x = torch.randn(256 * 300)
    y = torch.zeros_like(x)
    mod.launch("k", grid=(300, 1, 1), block=(256, 1, 1), args=[x, y])
    assert torch.equal(y, x + 1)


def test_every_truncation_and_msgpack_bomb_is_a_device_error():
    hsaco = assemble(kernel_asm(COPY, args=("ptr", "ptr")), "gfx942")
    for n in range(0, len(hsaco), 3):
        with pytest.raises(DeviceError):
            codeobject.parse(hsaco[:n])
    bombs = {b"\x91" * 100_000 + b"\x01": "nest deeper than 64",  # would be a RecursionError
             b"\xdf\xff\xff\xff\xff\x01\x02": "claims 4294967295 items",
             b"\x81\x91\x01\x02": "map key .* is a list",
             b"\xa3\xff\xfe\xfd": "not UTF-8",
             b"\xcf\x01\x02": "needs 8 bytes, only 2 remain"}
    for blob, why in bombs.items():
        with pytest.raises(DeviceError, match=why):
            codeobject.msgpack_decode(blob)


def test_branches_to_named_labels_run():
    """objdump prints a branch to a non-local label by its name (`s_cbranch_scc1 skip`): the target comes from
    the encoding. The kernel counts s4 down from 5 in a loop and skips a store of 99: out[lane] = 5 + lane."""
    body = """s_load_dwordx2 s[6:7], s[0:1], 0x0
              s_mov_b32 s4, 5
              v_mov_b32 v3, 0
            again:
              v_add_u32 v3, 1, v3
              s_sub_u32 s4, s4, 1
              s_cmp_eq_u32 s4, 0
              s_cbranch_scc0 again
              s_waitcnt lgkmcnt(0)
              s_cmp_eq_u32 s4, 0
              s_cbranch_scc1 skip
              v_mov_b32 v3, 99
            skip:
              v_add_u32 v3, v3, v0
              v_lshlrev_b32 v2, 2, v0
              """ + srd(8, 6, 256) + """
              buffer_store_dword v3, v2, s[8:11], 0 offen
              s_endpgm"""
    mod = module(body, args=("ptr",), sgprs=16, vgprs=8)
    assert {"again", "skip"} <= {i.text.split()[-1] for i in mod.instrs if "branch" in i.mnemonic}
    out = torch.zeros(64, dtype=torch.int32)
    mod.launch("k", (1, 1, 1), (64, 1, 1), [out])
    assert torch.equal(out, 5 + torch.arange(64, dtype=torch.int32))


def test_a_huge_grid_is_estimated_without_listing_its_workgroups():
    """The timing model runs one XCD's first round; it must not build a list of every workgroup first (of
    2^32 workgroups: two minutes and gigabytes once). Launching such a grid on the emulator is refused
    (test_misuse). Python's own allocations while estimating 2^26 workgroups stay far below a list of them."""
    import tracemalloc

    mod = module("s_endpgm", args=())
    tracemalloc.start()
    try:
        est = estimate(mod, "k", (2**16, 2**10, 1), (64, 1, 1), device="MI300X")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert est.cycles > 0 and peak < 32 << 20  # a list of the 2^23 workgroups on one XCD: ~300 MB


STORE_CONST = """s_load_dwordx2 s[4:5], s[0:1], 0x0
                 v_and_b32 v1, 0x3ff, v0
                 v_lshlrev_b32 v2, 2, v1
                 v_mov_b32 v3, {value}
                 s_waitcnt lgkmcnt(0)
                 global_store_dword v2, v3, s[4:5]
                 s_endpgm"""


def test_the_emulator_keeps_only_recently_used_programs(monkeypatch):
    """Decoded and bound programs are memoised for the most recent code objects only (a long-lived process
    loading many kernels must not keep them all); a module whose program left the memo still runs."""
    monkeypatch.setattr(emulator._DECODED, "maxsize", 2)
    monkeypatch.setattr(emulator._BOUND, "maxsize", 2)
    values = (1, 2, 3)
    mods = [module(STORE_CONST.format(value=v), args=("ptr",)) for v in values]
    for _ in range(2):  # the second round runs the first module after two others took its place
        for value, mod in zip(values, mods):
            out = torch.zeros(64, dtype=torch.int32)
            mod.launch("k", grid=(1, 1, 1), block=(64, 1, 1), args=[out])
            assert torch.equal(out, torch.full_like(out, value))
            assert len(emulator._DECODED) <= 2 and len(emulator._BOUND) <= 2
