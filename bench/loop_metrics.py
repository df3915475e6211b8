"""The GEMM's K loop as the hardware would see it: instruction mix and llvm-mca cycles per K=64 step of one wave.

    python bench/loop_metrics.py [--arch gfx950] [--tile 256x256x64] [--stages 1,2,3] [--layout NN,NT]
                                 [--schedule interleave,plain] [--copy auto,lds_dma] [--no-estimate]
                                 [--dtype fp8|mxfp8|mxfp4] [--threads 512] [--ping-pong auto,off]

For each config, compiles tests/kernels.py `gemm` (bf16, 256 threads unless --threads) without running it, finds the K loop in
the kernel's `.s` (the last label that a `s_cbranch_*` jumps back to) and prints, per K=64 step of one wave:
instructions, MFMAs, non-MFMA instructions per MFMA, ds_read, ds_write, loads (LDS DMA / into VGPRs),
s_waitcnt, vmcnt(0), s_barrier, v_readfirstlane, scratch instructions, and llvm-mca's cycles for the loop body
against the MFMA issue bound.

The bound is the loop's MFMA FLOPs at the arch's full bf16 rate: the best FLOPs per 4-clock pass of the arch's MFMA
shapes (gfx942: 32x32x8, 16384 FLOP in 8 passes = 2048 per pass; gfx950: 32x32x16, 4096 per pass), so a half-rate
legacy shape on gfx950 cannot flatter it. LLVM's AMDGPU scheduling model (what llvm-mca runs) books one cycle per
MFMA pass (a 32x32 MFMA occupies the XDL pipe for 8 of its cycles), so the bound is counted in passes too. A loop that covers several K=64 steps (unrolled by the pipeliner) is
divided by its number of steps. llvm-mca models one wave alone on a SIMD with every memory access hitting its
scheduling model's latency: the ratio says how well the instruction stream keeps the MFMA pipe fed, not what a
loaded GPU achieves.

`--dtype fp8` compiles the same kernel on the arch's e4m3 (float8_e4m3fnuz on gfx942, float8_e4m3fn on gfx950; NT
has B K-major, NN has B as (K, N): read with ds_read_b64_tr_b8 on gfx950, transposed by the register copy on gfx942)
with a bf16 C, and takes the bound at the arch's full fp8 rate: the best fp8 FLOPs per
pass of any fp8 MFMA the arch has (arch.lowp_mfmas: gfx942 32x32x16 fp8, 4096 per pass; gfx950 the f8f6f4 32x32x64,
8192 per pass, which T.gemm emits for fp8 on gfx950). llvm-mca books an f8f6f4 MFMA at the fp4 rate (8 cycles for
32x32x64); on 8-bit operands it is booked twice here, at the 16 passes it takes (`_booked`).

`--dtype mxfp4` / `--dtype mxfp8` (gfx950) compile tests/kernels.py `mx_gemm`: the MX-scaled T.gemm on packed fp4
(float4_e2m1fn_x2) / e4m3 with E8M0 scales copied beside the operands, bound at the scaled f8f6f4 MFMA's full rate
for that format: 16384 FLOPs per pass for fp4 (32x32x64 in 8 passes, llc's hazard recognizer; llvm-mca books every
f8f6f4 form, scaled too, at 8 cycles, which is right for fp4 and booked twice for 8-bit operands as for fp8), 8192
for fp8. The scale bytes add one ds_read_u8 per MFMA k-step and operand tile.

Two more columns, after those: `salu`, the scalar instructions per K=64 step that do work (every `s_` instruction
but s_waitcnt, s_barrier, s_nop, s_setprio and branches: descriptor rebuilds and address arithmetic left in the
loop show here), and the timing model's view of the whole kernel (`kernel.estimate()`, MI300X for gfx942, MI355X
for gfx950) on a fixed 2048^3 bf16 problem: `est_kclk`, its cycles in thousands, and `mfma%`, the share of those
cycles each SIMD's MFMA pipe is busy (100 = the MFMA bound; unlike llvm-mca it sees memory latency, waits,
barriers and the other waves). `--no-estimate` leaves them out (the estimates take most of the bench's time).

num_stages=2 rows come once per schedule of `--schedule` (amdgcn/schedule.py: the default list scheduler,
`interleave`, and `plain`, the order the lowering passes emit), so the interleave's effect is side by side.
Pipelined rows (num_stages >= 2) come once per copy path of `--copy` (`tilegcn.jit(copy=...)`: "auto", "lds_dma",
"registers"), so gfx942's 4-byte LDS DMA and its register-staged copies compare side by side, and once per K-loop
shape of `--ping-pong` ("auto": the compiler's choice, a ping-pong at 8 waves on both arches; "on"; "off": the wave
groups in step; T.Pipelined's `ping_pong` annotation). A ping-pong loop's wave runs a K phase's reads and copies,
a barrier, the phase's MFMAs, a barrier; llvm-mca sees one wave and so the barriers' cost to it, not the other wave
group's MFMAs that fill them on hardware (and in the timing model).
"""
from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import torch  # noqa: E402

import kernels  # noqa: E402
import tilegcn  # noqa: E402
from tilegcn.amdgcn.arch import F8F6F4_FORMATS, f8f6f4_passes, get_arch  # noqa: E402
from tilegcn.amdgcn.schedule import INTERLEAVE  # noqa: E402
from tilegcn.toolchain import find_llvm  # noqa: E402

MCA_ITERATIONS = 50
ESTIMATE_SIZE = 2048  # M = N = K of the problem the timing model estimates
MX_FORMAT_CODES = {"mxfp8": 0, "mxfp4": 4}  # the f8f6f4 cbsz / blgp of the MX operand formats (e4m3, e2m1)
# scalar instructions that do no work of the loop: waits, barriers, padding, priority hints and branches
_NOT_SALU = ("s_waitcnt", "s_barrier", "s_nop", "s_setprio", "s_branch", "s_cbranch")
_MFMA = re.compile(r"v_mfma_\w+?_(\d+)x(\d+)x(\d+)")


def loop_body(asm: str) -> list:
    """Instruction lines (no labels, comments, directives) of the last loop: label L ... s_cbranch_* L."""
    lines = [ln.split("//")[0].rstrip() for ln in asm.splitlines()]
    branches = [(i, ln.split()[-1]) for i, ln in enumerate(lines) if ln.strip().startswith("s_cbranch")]
    for end, target in reversed(branches):
        start = next((i for i in range(end, -1, -1) if lines[i].strip() == f"{target}:"), None)
        if start is not None:
            return [ln.strip() for ln in lines[start + 1:end + 1] if ln.strip() and not ln.strip().endswith(":")]
    raise ValueError("no loop (label + backward s_cbranch) in the assembly")


def full_rate_flops_per_pass(arch, dtype: str = "bf16") -> float:
    """Best MFMA FLOPs per pass of one SIMD for `dtype` operands: max over the arch's shapes of 2*M*N*K / passes;
    for "fp8" over every MFMA with fp8 operands the arch has (the f8f6f4 forms with their 8-bit passes included);
    for "mxfp8" / "mxfp4" over the scaled f8f6f4 forms (gfx950) with 8-bit / fp4 operands (cbsz = blgp = 0 / 4)."""
    if dtype in MX_FORMAT_CODES:
        code = MX_FORMAT_CODES[dtype]
        scaled = [m for m in arch.lowp_mfmas.values() if m.scaled]
        return max(2 * m.M * m.N * m.K / f8f6f4_passes(m, code, code) for m in scaled)
    if dtype == "fp8":
        fp8 = [(m, f8f6f4_passes(m, 0, 0) if m.a_type == "f8f6f4" else m.passes) for m in arch.lowp_mfmas.values()
               if m.a_type in ("fp8", "f8f6f4") and not m.scaled]
        return max(2 * m.M * m.N * m.K / passes for m, passes in fp8)
    return max(2 * s.M * s.N * s.K / s.passes for s in arch.mfma_shapes[dtype])


def mca_cycles(body: list, arch_name: str) -> float:
    mca = find_llvm(arch_name).tool("llvm-mca")
    text = "\n".join(line for i in body if not i.startswith("s_cbranch") for line in _booked(i)) + "\n"
    out = subprocess.run([mca, "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch_name}", f"-iterations={MCA_ITERATIONS}"],
                         input=text, capture_output=True, text=True, check=True).stdout
    return int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / MCA_ITERATIONS


def _booked(instruction: str) -> list:
    """The lines llvm-mca gets for one instruction: an f8f6f4 MFMA on two 8-bit operands twice. LLVM 22's scheduling
    model books v_mfma_f32_32x32x64_f8f6f4 at 8 cycles whatever cbsz / blgp say (measured: a stream of them has
    RThroughput 8, as the fp8_fp8 32x32x16), the fp4 rate; with 8-bit operands it takes 16 passes (llc's hazard
    recognizer, arch.f8f6f4_passes; MI355X's fp8 peak is twice its bf16 one, not four times), so each stands for
    two bookings here."""
    op = instruction.split()[0] if instruction.split() else ""
    if op == "v_permlane32_swap_b32":
        return _swap_as_moves(instruction)
    if not op.endswith("_f8f6f4"):
        return [instruction]
    mods = dict(w.split(":") for w in instruction.split() if re.fullmatch(r"(cbsz|blgp):\d+", w))
    eight_bit = any(F8F6F4_FORMATS[int(mods.get(m, 0))][1] == 8 for m in ("cbsz", "blgp"))
    return [instruction] * (2 if eight_bit else 1)


def _swap_as_moves(instruction: str) -> list:
    """`v_permlane32_swap_b32 a, b` as the two VALU moves llvm-mca books it at (2 micro-ops, RThroughput 2.0 in LLVM
    22's gfx950 model), writing both registers as the swap does: llvm-mca-22 never finishes a block where the swap
    comes between a `ds_read` and an MFMA (6 lines suffice: the ds_read, v_maximum3, v_mov, s_nop, the swap, the
    MFMA; the software-pipelined flash attention loop has them)."""
    a, b = (r.strip() for r in instruction.split(None, 1)[1].split(","))
    return [f"v_mov_b32 {a}, {b}", f"v_mov_b32 {b}, {a}"]


def metrics(asm: str, arch_name: str, block_M: int, block_N: int, threads: int, dtype: str = "bf16") -> dict:
    arch = get_arch(arch_name)
    body = loop_body(asm)
    ops = [i.split()[0] for i in body]
    mfma_flops = sum(2 * int(a) * int(b) * int(c) for i in body for a, b, c in _MFMA.findall(i.split()[0]))
    waves = threads // 64
    steps = mfma_flops / (2 * block_M * block_N // waves * 64)  # K=64 steps of one wave per loop iteration
    bound = mfma_flops / full_rate_flops_per_pass(arch, dtype)
    cycles = mca_cycles(body, arch_name)
    mfmas = sum(op.startswith("v_mfma") for op in ops)
    count = lambda pred: sum(1 for i in body if pred(i)) / steps  # noqa: E731
    return dict(
        insts=len(body) / steps, mfma=mfmas / steps, other_per_mfma=(len(body) - mfmas) / max(mfmas, 1),
        ds_read=count(lambda i: i.startswith("ds_read")), ds_write=count(lambda i: i.startswith("ds_write")),
        lds_dma=count(lambda i: i.startswith("buffer_load") and i.endswith(" lds")),
        vgpr_loads=count(lambda i: i.startswith(("buffer_load", "global_load")) and not i.endswith(" lds")),
        waitcnt=count(lambda i: i.startswith("s_waitcnt")), vmcnt0=count(lambda i: "vmcnt(0)" in i),
        barrier=count(lambda i: i.startswith("s_barrier")), readfirstlane=count(lambda i: "readfirstlane" in i),
        scratch=count(lambda i: i.startswith("scratch_") or "buffer_store" in i and "s[0:3]" in i),
        mca=cycles / steps, bound=bound / steps, ratio=cycles / bound,
        salu=count(is_salu),
    )


def is_salu(instruction: str) -> bool:
    """A scalar instruction that does work (see the module docstring)."""
    return instruction.startswith("s_") and not instruction.startswith(_NOT_SALU)


def model_estimate(arch, tile, layout, stages, threads=256, schedule=INTERLEAVE, copy="auto", dtype="bf16",
                   ping_pong=None) -> dict:
    """The timing model's estimate of the whole kernel on an ESTIMATE_SIZE^3 problem (the arch's device)."""
    est = gemm_kernel(arch, tile, layout, stages, (ESTIMATE_SIZE,) * 3, threads, schedule, copy, dtype,
                      ping_pong).estimate()
    return dict(est_kclk=est.cycles / 1000, mfma_pct=est.breakdown["mfma_busy_pct"])


def compile_asm(arch, tile, layout, stages, threads=256, schedule=INTERLEAVE, copy="auto", dtype="bf16",
                ping_pong=None):
    bm, bn, bk = tile
    return gemm_kernel(arch, tile, layout, stages, (bm, bn, bk * 8), threads, schedule, copy, dtype, ping_pong).asm


@functools.lru_cache(maxsize=None)
def jit_gemm(schedule: str, copy: str = "auto", kernel: str = "gemm"):
    """tests/kernels.py `gemm` (or `mx_gemm`) with `schedule` and `copy` (the default decorator's: "interleave",
    "auto")."""
    jitted = getattr(kernels, kernel)
    if (schedule, copy) == (INTERLEAVE, "auto"):
        return jitted
    return tilegcn.jit(jitted.fn, schedule=schedule, copy=copy)


def operand_dtype(arch, dtype: str):
    """The torch dtype of `dtype` ("bf16", or "fp8": the arch's e4m3 encoding)."""
    return getattr(torch, get_arch(arch).fp8_dtypes[0]) if dtype == "fp8" else torch.bfloat16


def gemm_kernel(arch, tile, layout, stages, shape, threads=256, schedule=INTERLEAVE, copy="auto", dtype="bf16",
                ping_pong=None):
    """tests/kernels.py `gemm` compiled (not run) for `dtype` operands of `shape` (M, N, K), C in bf16 (`mx_gemm`,
    B K-major, for the MX dtypes); `ping_pong`: its K loop's annotation (None: the compiler's choice)."""
    (bm, bn, bk), (M, N, K) = tile, shape
    if dtype in MX_FORMAT_CODES:
        return mx_gemm_kernel(arch, tile, stages, shape, threads, schedule, copy, dtype)
    A = torch.empty(M, K, dtype=operand_dtype(arch, dtype))
    B = torch.empty(*((N, K) if layout == "NT" else (K, N)), dtype=operand_dtype(arch, dtype))
    C = torch.empty(M, N, dtype=torch.bfloat16)
    return jit_gemm(schedule, copy).compile(A, B, C, arch=arch, block_M=bm, block_N=bn, block_K=bk, threads=threads,
                                      transpose_B=layout == "NT", num_stages=stages, ping_pong=ping_pong)


def mx_gemm_kernel(arch, tile, stages, shape, threads, schedule, copy, dtype):
    """tests/kernels.py `mx_gemm` compiled (not run): MXFP8 (e4m3) or MXFP4 operands of `shape`, E8M0 scales."""
    (bm, bn, bk), (M, N, K) = tile, shape
    per_byte = 2 if dtype == "mxfp4" else 1
    elem = torch.float4_e2m1fn_x2 if dtype == "mxfp4" else torch.float8_e4m3fn
    A, B = (torch.empty(rows, K // per_byte, dtype=torch.uint8).view(elem) for rows in (M, N))
    SA, SB = (torch.empty(rows, K // 32, dtype=torch.uint8) for rows in (M, N))
    C = torch.empty(M, N, dtype=torch.bfloat16)
    return jit_gemm(schedule, copy, "mx_gemm").compile(A, B, SA, SB, C, arch=arch, block_M=bm, block_N=bn,
                                                       block_K=bk, threads=threads, num_stages=stages)


COLUMNS = ("insts", "mfma", "other_per_mfma", "ds_read", "ds_write", "lds_dma", "vgpr_loads", "waitcnt", "vmcnt0",
           "barrier", "readfirstlane", "scratch", "mca", "bound", "ratio")
HEAD = ("insts", "mfma", "oth/mfma", "ds_rd", "ds_wr", "dma", "ld_v", "wait", "vm(0)", "bar", "rfl", "scr", "mca",
        "bound", "ratio")
EXTRA_COLUMNS = ("salu", "est_kclk", "mfma_pct")  # after COLUMNS: scalar work, the timing model's estimate
EXTRA_HEAD = ("salu", "est_kclk", "mfma%")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx942,gfx950")
    ap.add_argument("--tile", default="256x256x64,128x128x64")
    ap.add_argument("--layout", default="NN,NT")
    ap.add_argument("--stages", default="1,2,3")
    ap.add_argument("--schedule", default="interleave,plain",
                    help="schedules compared (amdgcn/schedule.py); plain rows only for num_stages=2")
    ap.add_argument("--copy", default="auto",
                    help="copy paths compared (tilegcn.jit(copy=...)), for num_stages >= 2 rows")
    ap.add_argument("--threads", type=int, default=256, help="threads per workgroup (512: 8 waves, 2 per SIMD; "
                    "gfx942's 256x256 tile fits them up to num_stages=2, its next K step staged in VGPRs)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp8", "mxfp8", "mxfp4"),
                    help="operand dtype (fp8: the arch's e4m3, B K-major: use --layout NT; mxfp8 / mxfp4: gfx950's "
                    "MX-scaled T.gemm on e4m3 / packed fp4 with E8M0 scales, tests/kernels.py mx_gemm)")
    ap.add_argument("--ping-pong", default="auto", help="K-loop shapes compared for num_stages >= 2 rows: auto, on, "
                    "off (T.Pipelined's ping_pong annotation: None, True, False)")
    ap.add_argument("--no-estimate", dest="estimate", action="store_false",
                    help=f"skip the timing model's {ESTIMATE_SIZE}^3 estimate (est_kclk, mfma%%)")
    args = ap.parse_args(argv)
    columns, head = COLUMNS + EXTRA_COLUMNS, HEAD + EXTRA_HEAD
    if not args.estimate:
        columns, head = columns[:-2], head[:-2]
    schedules, copies = args.schedule.split(","), args.copy.split(",")
    print(f"{'config':<58}" + "".join(f"{h:>9}" for h in head))
    for arch in args.arch.split(","):
        for tile in args.tile.split(","):
            dims = tuple(int(x) for x in tile.split("x"))
            for layout in args.layout.split(","):
                for stages in (int(s) for s in args.stages.split(",")):
                    for schedule in (schedules if stages == 2 else schedules[:1]):
                        for copy in (copies if stages > 1 else ["auto"]):
                            for pp in (args.ping_pong.split(",") if stages > 1 else ["auto"]):
                                _row(arch, tile, dims, layout, stages, schedule, copy, columns, args.estimate,
                                     args.threads, args.dtype, pp)


PING_PONG = {"auto": None, "on": True, "off": False}


def _row(arch, tile, dims, layout, stages, schedule, copy, columns, estimate, threads=256, dtype="bf16", pp="auto"):
    name = f"{arch} {tile} {layout} stages={stages} {schedule} {copy}" + (f" {threads} thr" if threads != 256 else "")
    name += (f" {dtype}" if dtype != "bf16" else "") + (f" pp={pp}" if pp != "auto" else "")
    try:
        asm = compile_asm(arch, dims, layout, stages, threads=threads, schedule=schedule, copy=copy, dtype=dtype,
                          ping_pong=PING_PONG[pp])
        m = metrics(asm, arch, dims[0], dims[1], threads, dtype)
        m.update(model_estimate(arch, dims, layout, stages, threads=threads, schedule=schedule, copy=copy,
                                dtype=dtype, ping_pong=PING_PONG[pp]) if estimate else {})
    except Exception as e:  # a config that does not fit (LDS) is reported, not fatal
        print(f"{name:<58} {type(e).__name__}: {str(e)[:110]}")
        return
    print(f"{name:<58}" + "".join(f"{m[c]:>9.2f}" if isinstance(m[c], float) else f"{m[c]:>9}" for c in columns),
          flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TILEGCN_DEVICE", "emulator")
    main()
