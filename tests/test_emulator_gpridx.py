"""VGPR index mode on the emulated device (s_set_gpr_idx_on / off, tilegcn/runtime/emulator/ops_gpridx.py),
which aiter's gfx942 int8 GEMM walks its accumulators with. The oracle is llc: with -amdgpu-vgpr-index-mode it
lowers a uniform-index extractelement to s_set_gpr_idx_on sN, gpr_idx(SRC0); v_mov_b32; s_set_gpr_idx_off, and
the result must be torch's element. The hand-written case checks what llc does not emit: a 64-bit source
(aiter's v_pk_mul_f32 on scale pairs) and that only the named source is indexed.
"""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import llc_module, run_lanes  # noqa: E402

EXTRACT = """define amdgpu_kernel void @k(ptr addrspace(1) %in, ptr addrspace(1) %out, i32 %idx) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr <32 x i32>, ptr addrspace(1) %in, i32 %tid
  %v = load <32 x i32>, ptr addrspace(1) %p
  %w = mul <32 x i32> %v, %v
  store <32 x i32> %w, ptr addrspace(1) %p
  %e = extractelement <32 x i32> %w, i32 %idx
  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %e, ptr addrspace(1) %o
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
"""


def test_llc_index_mode_extract_reads_the_indexed_vgpr():
    mod = llc_module(EXTRACT, "gfx942", ("-amdgpu-vgpr-index-mode",))
    assert "s_set_gpr_idx_on" in {ins.base for ins in mod.instrs}  # the oracle did use the mode
    x = torch.randint(-2**15, 2**15, (64, 32), dtype=torch.int32, generator=torch.Generator().manual_seed(3))
    for idx in (0, 7, 31):
        buf, out = x.clone(), torch.zeros(64, dtype=torch.int32)
        mod.launch("k", grid=(1, 1, 1), block=(64, 1, 1), args=[buf, out, idx])
        assert torch.equal(out, x[:, idx] * x[:, idx])


def test_pair_source_and_only_named_source_indexed():
    a = torch.randn(64, dtype=torch.float32, generator=torch.Generator().manual_seed(4))
    b, c = a * 3, a - 1
    body = """s_mov_b32 s97, 1
              s_set_gpr_idx_on s97, gpr_idx(SRC0)
              v_mov_b32 v20, v10
              v_add_u32 v21, v10, v10
              v_pk_mul_f32 v[22:23], v[10:11], v[10:11]
              s_set_gpr_idx_off
              v_mov_b32 v24, m0"""
    outs = run_lanes(body, [a, b, c], n_out=5, block=64)
    bits = [o.view(torch.float32) for o in outs]
    assert torch.equal(bits[0], b)  # v10 + 1
    assert torch.equal(outs[1], b.view(torch.int32) + a.view(torch.int32))  # src1 not indexed
    assert torch.equal(bits[2], b * a) and torch.equal(bits[3], c * b)  # v[11:12] * v[10:11]
    assert torch.equal(outs[4] & 0xF0FF, torch.full((64,), 0x1001, dtype=torch.int32))  # M0[7:0], SRC0 bit


@pytest.mark.parametrize("inside", ["s_add_u32 s96, s96, 1", "buffer_load_dword v20, v2, s[8:11], 0 offen"])
def test_non_valu_inside_a_region_is_refused(inside):
    from tilegcn.errors import EmulatorError

    body = f"""s_mov_b32 s97, 0
               s_set_gpr_idx_on s97, gpr_idx(SRC0)
               {inside}
               s_set_gpr_idx_off"""
    with pytest.raises(EmulatorError, match="index mode region"):
        run_lanes(body, [torch.zeros(64, dtype=torch.int32)], block=64)
