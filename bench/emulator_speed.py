"""Speed of the emulated device: lane-instructions per second on a large elementwise kernel, and the time
of a 1024^3 bf16 GEMM compiled by tilegcn (examples/gemm/gemm.py, 256x256x64 tiles, 512 threads).

    python bench/emulator_speed.py [--elements N] [--repeats R] [--arch gfx942] [--no-check] [--gemm-size 1024]

The kernel (hand-written asm, assembled with LLVM) computes y = relu(a * x + b) * x + x*x over N floats,
one element per lane, with buffer loads/stores and a handful of VALU ops per element. Lane-instructions
are the EXEC-active lanes summed over every executed vector instruction (LaunchStats.lane_instructions);
the figure printed is the median over the repeats.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tilegcn.runtime import emulator  # noqa: E402
from tilegcn.toolchain import assemble  # noqa: E402

BODY = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_load_dwordx2 s[6:7], s[0:1], 0x8
  s_load_dwordx2 s[16:17], s[0:1], 0x10
  v_and_b32 v1, 0x3ff, v0
  s_lshl_b32 s3, s2, 8
  v_add_u32 v1, s3, v1
  v_lshlrev_b32 v2, 2, v1
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s8, s4
  s_and_b32 s9, s5, 0xffff
  s_mov_b32 s10, s16
  s_mov_b32 s11, 0x20000
  s_mov_b32 s12, s6
  s_and_b32 s13, s7, 0xffff
  s_mov_b32 s14, s16
  s_mov_b32 s15, 0x20000
  buffer_load_dword v3, v2, s[8:11], 0 offen
  s_waitcnt vmcnt(0)
  v_fma_f32 v4, v3, 2.0, 1.0
  v_max_f32 v4, 0, v4
  v_mul_f32 v5, v3, v3
  v_fmac_f32 v5, v4, v3
  v_add_f32 v5, v5, v3
  v_cmp_gt_f32 vcc, 0, v5
  s_nop 1
  v_cndmask_b32 v5, v5, 0, vcc
  v_mul_f32 v5, 0.5, v5
  buffer_store_dword v5, v2, s[12:15], 0 offen
  s_endpgm
"""


def kernel_text(arch: str) -> str:
    return f""".amdgcn_target "amdgcn-amd-amdhsa--{arch}"
.text
.globl ew
.p2align 8
.type ew,@function
ew:
{BODY}
.rodata
.p2align 6
.amdhsa_kernel ew
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_next_free_vgpr 8
  .amdhsa_next_free_sgpr 24
  .amdhsa_accum_offset 8
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: ew
    .symbol: ew.kd
    .kernarg_segment_size: 24
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 24
    .vgpr_count: 8
    .max_flat_workgroup_size: 256
    .args:
      - {{.offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global}}
      - {{.offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global}}
      - {{.offset: 16, .size: 4, .value_kind: by_value}}
...
.end_amdgpu_metadata
"""


def reference(x):
    v4 = torch.clamp(x * 2 + 1, min=0)
    v5 = x * x + v4 * x + x
    return torch.where(v5 < 0, 0, v5) * 0.5


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=1 << 22)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--arch", default="gfx942")
    ap.add_argument("--no-check", action="store_true", help="launch with check=False")
    ap.add_argument("--gemm-size", type=int, default=1024, help="M = N = K of the GEMM (0 skips it)")
    args = ap.parse_args(argv)
    n = args.elements
    mod = emulator.load(assemble(kernel_text(args.arch), args.arch))
    x = torch.randn(n)
    y = torch.empty(n)
    grid = (-(-n // 256), 1, 1)
    rates, secs = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        stats = mod.launch("ew", grid, (256, 1, 1), [x, y, 4 * n], check=not args.no_check)
        dt = time.perf_counter() - t0
        secs.append(dt)
        rates.append(stats.lane_instructions / dt)
    if not torch.allclose(y, reference(x), rtol=1e-5, atol=1e-6):
        raise SystemExit("emulator result differs from the torch reference")
    print(f"elementwise kernel, {n} elements, {stats.waves} waves, {stats.total_instructions} wave-instructions, "
          f"{stats.lane_instructions} lane-instructions per launch, check={not args.no_check}, "
          f"torch threads during a launch: {os.environ.get('TILEGCN_EMULATOR_THREADS', '1')}")
    print(f"median {statistics.median(secs):.3f} s per launch; "
          f"{statistics.median(rates) / 1e6:.1f} M lane-instructions/s (median of {args.repeats})")
    if args.gemm_size:
        gemm_time(args.gemm_size, args.arch, args.repeats, not args.no_check)


def gemm_time(size: int, arch: str, repeats: int, check: bool):
    """Median launch time of the tilegcn GEMM on the emulator (compile excluded), checked against torch."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "gemm"))
    from gemm import gemm

    a = torch.randn(size, size, dtype=torch.bfloat16)
    b = torch.randn(size, size, dtype=torch.bfloat16)
    c = torch.empty(size, size, dtype=torch.bfloat16)
    kernel = gemm.compile(a, b, c, arch=arch)
    mod = emulator.load(open(kernel.hsaco_path, "rb").read())
    meta = kernel.metadata
    secs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        stats = mod.launch(kernel.name, tuple(meta["grid"]), tuple(meta["block"]), [a, b, c], check=check)
        secs.append(time.perf_counter() - t0)
    ref = a.float() @ b.float()
    err = (c.float() - ref).abs().max().item()
    if err > 2.0 ** -7 * ref.abs().max().item():
        raise SystemExit(f"GEMM result differs from torch (max error {err})")
    print(f"GEMM {size}^3 bf16 on {arch}, tile 256x256x64, 512 threads: {stats.waves} waves, "
          f"{stats.total_instructions} wave-instructions, check={check}; "
          f"median {statistics.median(secs):.2f} s per launch (median of {repeats}; target <= 10 s)")


if __name__ == "__main__":
    main()
