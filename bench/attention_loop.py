"""Flash attention's KV loop as the hardware would see it: instruction mix and llvm-mca cycles per KV tile of one wave,
against the MFMA bound, for TileLang's GQA forward port (examples/tilelang/example_gqa_fwd_bshd.py, fp16, non-causal)
at the configs its autotune space offers on AMD (block_M / block_N 64 or 128, 128 or 256 threads, 1 or 2 stages):

    PYTHONPATH=$PWD python bench/attention_loop.py [--arch gfx950] [--dim 128] [--configs 128x64x2x256,...]
                                                   [--shape gqa|mha] [--no-estimate] [--detail N]

For each config (block_M x block_N x num_stages x threads) it compiles the kernel at issue 21's GQA shape (64 query
heads over 8 KV heads, d = --dim, b = 1, s = 16384; `--shape mha`: HipKittens' 16 heads, b = 16) without running it, finds the KV loop in the `.s` (the last
label a `s_cbranch_*` jumps back to: bench/loop_metrics.py `loop_body`) and prints per KV tile of one wave:
instructions, MFMAs, VALU instructions (v_* but MFMAs), v_exp_f32, ds_read, LDS DMA loads, loads into VGPRs,
s_waitcnt, s_barrier, v_accvgpr_read/write (accumulator round trips) and scratch instructions; then llvm-mca's cycles
for the loop body (-iterations=50, one wave alone on its SIMD, every memory access at the scheduling model's
latency) against the MFMA bound: the loop's MFMA FLOPs at the arch's full f16 rate (2 * 32 * 32 * 16 per 8 passes on
gfx950, 32x32x8 per 8 on gfx942), booked, like llvm-mca's AMDGPU model, at one cycle per pass (bench/loop_metrics.py's
docstring says more). A loop that the pipeliner unrolled over S tiles is divided by S. Then the kernel's registers
(VGPRs + AGPRs, scratch bytes) and the timing model's TFLOP/s (`kernel.estimate()` with every loop trip simulated,
as bench/attention.py says why (`--detail N`: fast-forward after N trips); MI355X for gfx950, MI300X for
gfx942) at the same shape; `--no-estimate` leaves it out.

`--setprio` also prints, per config, the model's TFLOP/s of the same kernel with `s_setprio 1` before each run of
MFMAs of the KV loop and `s_setprio 0` before the VALU instruction after it (the edited `.s` through
`CompiledKernel.with_asm`): whether raising the MFMA issuer's priority pays, by the model.

Memory: the timing model's estimate at `--shape mha` (b = 16) takes about 5 GB of host memory (gfx950 256x64 over
512 threads, every trip simulated: 5.1 GB peak, 42 s, 2026-11-27); `--no-estimate` leaves it out.

The ratio mca / bound says how well the instruction stream of one wave keeps the MFMA pipe fed (1.0: the MFMAs
alone); VALU work that depends on the tile's own MFMAs (the softmax between QK^T and PV) and is not overlapped with
another tile's MFMAs shows as cycles above the bound.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench"), str(REPO / "examples" / "tilelang")]

import torch  # noqa: E402

import example_gqa_fwd_bshd  # noqa: E402
from loop_metrics import loop_body, mca_cycles  # noqa: E402
from tilegcn.amdgcn.arch import get_arch  # noqa: E402

# issue 21's shapes: (batch, query heads, KV heads, seq): GQA as aiter's published FAv3 figure, MHA as HipKittens'
SHAPES = {"gqa": (1, 64, 8, 16384), "mha": (16, 16, 16, 16384)}
CONFIGS = "64x64x2x128,128x64x1x256,128x64x2x256,128x128x2x256,64x128x2x128"
WHOLE_LOOPS = 1 << 20  # detail_iterations past any loop's trip count: every trip simulated (bench/attention.py)
_MFMA = re.compile(r"v_mfma_\w+?_(\d+)x(\d+)x(\d+)")


def compile_attention(arch: str, block_M: int, block_N: int, stages: int, threads: int, dim: int, shape="gqa"):
    batch, heads, kv_heads, seq = SHAPES[shape]
    q = torch.empty(batch, seq, heads, dim, dtype=torch.float16)
    kv = torch.empty(batch, seq, kv_heads, dim, dtype=torch.float16)
    kernel = example_gqa_fwd_bshd.flashattn(batch, heads, seq, dim, False, groups=heads // kv_heads,
                                            block_M=block_M, block_N=block_N, num_stages=stages, threads=threads)
    return kernel.compile(q, kv, kv, arch=arch)


def f16_flops_per_pass(arch) -> float:
    return max(2 * s.M * s.N * s.K / s.passes for s in arch.mfma_shapes["f16"])


def loop_metrics(asm: str, arch_name: str, block_M: int, block_N: int, threads: int, dim: int) -> dict:
    """Per KV tile of one wave: instruction counts, llvm-mca cycles, the MFMA bound and their ratio."""
    body = loop_body(asm)
    ops = Counter(i.split()[0] for i in body)
    flops = sum(2 * int(m) * int(n) * int(k) for i in body for m, n, k in _MFMA.findall(i.split()[0]))
    tile_flops = 2 * 2 * (block_M // (threads // 64)) * block_N * dim  # QK^T and PV of one wave's rows
    tiles = flops / tile_flops
    bound = flops / f16_flops_per_pass(get_arch(arch_name))
    cycles = mca_cycles(body, arch_name)
    count = lambda pred: sum(n for op, n in ops.items() if pred(op)) / tiles  # noqa: E731
    mfma = count(lambda op: op.startswith("v_mfma"))
    return dict(
        tiles=tiles, insts=len(body) / tiles, mfma=mfma,
        valu=count(lambda op: op.startswith("v_") and not op.startswith("v_mfma")),
        exp=count(lambda op: op == "v_exp_f32"), ds_read=count(lambda op: op.startswith("ds_read")),
        lds_dma=sum(1 for i in body if i.startswith("buffer_load") and i.endswith(" lds")) / tiles,
        vgpr_loads=sum(1 for i in body if i.startswith(("buffer_load", "global_load")) and not i.endswith(" lds"))
        / tiles,
        waitcnt=count(lambda op: op == "s_waitcnt"), barrier=count(lambda op: op == "s_barrier"),
        acc_rw=count(lambda op: op.startswith("v_accvgpr")),
        scratch=count(lambda op: op.startswith("scratch_")),
        mca=cycles / tiles, bound=bound / tiles, ratio=cycles / bound,
    )


COLUMNS = ("insts", "mfma", "valu", "exp", "ds_read", "lds_dma", "vgpr_loads", "waitcnt", "barrier", "acc_rw",
           "scratch", "mca", "bound", "ratio")
HEAD = ("insts", "mfma", "valu", "v_exp", "ds_rd", "dma", "ld_v", "wait", "bar", "acc_rw", "scr", "mca", "bound",
        "ratio")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx950,gfx942")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--configs", default=CONFIGS, help="block_M x block_N x num_stages x threads, comma separated")
    ap.add_argument("--shape", default="gqa", choices=sorted(SHAPES),
                    help="gqa: b=1, 64 query / 8 KV heads, s=16384; mha: b=16, 16 heads, s=16384 (the same BSHD "
                    "kernel, groups=1)")
    ap.add_argument("--setprio", action="store_true",
                    help="also estimate the kernel with s_setprio 1 / 0 around the loop's MFMA runs")
    ap.add_argument("--detail", type=int, default=WHOLE_LOOPS,
                    help="loop trips the model simulates before it fast-forwards (default: all of them)")
    ap.add_argument("--no-estimate", dest="estimate", action="store_false",
                    help="skip the timing model's TFLOP/s at the GQA shape")
    args = ap.parse_args(argv)
    print(f"{'config':<28}" + "".join(f"{h:>8}" for h in HEAD) + f"{'regs':>9}{'TFLOP/s':>9}  limited by")
    for arch in args.arch.split(","):
        for config in args.configs.split(","):
            _row(arch, config, args.dim, args.estimate, args.shape, args.setprio, args.detail)


def _row(arch: str, config: str, dim: int, estimate: bool, shape: str = "gqa", setprio: bool = False,
         detail: int | None = None):
    bm, bn, stages, threads = (int(x) for x in config.split("x"))
    name = f"{arch} d{dim} {bm}x{bn} s{stages} {threads}t"
    try:
        k = compile_attention(arch, bm, bn, stages, threads, dim, shape)
        m = loop_metrics(k.asm, arch, bm, bn, threads, dim)
    except Exception as e:  # a config that does not fit (LDS, registers) is reported, not fatal
        print(f"{name:<28} {type(e).__name__}: {str(e)[:110]}")
        return
    regs = f"{k.metadata['vgprs']}+{k.metadata['agprs']}"
    tail = ""
    if estimate:
        e = k.estimate(detail_iterations=detail)
        batch, heads, _, seq = SHAPES[shape]
        flops = 4 * batch * heads * seq * seq * dim
        limit = next(ln for ln in str(e).splitlines() if ln.strip().startswith("limited by")).split(None, 2)[2]
        tail = f"{flops / e.seconds / 1e12:>9.1f}  {limit}"
        if setprio:
            path = Path(tempfile.mkdtemp()) / "setprio.s"
            path.write_text(with_mfma_priority(k.asm))
            tail += f"; with s_setprio: {flops / k.with_asm(str(path)).estimate(detail_iterations=detail).seconds / 1e12:.1f}"
    print(f"{name:<28}" + "".join(f"{m[c]:>8.1f}" if c != "ratio" else f"{m[c]:>8.2f}" for c in COLUMNS)
          + f"{regs:>9}" + tail, flush=True)


def with_mfma_priority(asm: str) -> str:
    """`asm` with `s_setprio 1` before each run of MFMAs in the last loop and `s_setprio 0` before the first VALU
    instruction after it."""
    lines = asm.splitlines()
    head = max(i for i, ln in enumerate(lines) if ln.strip().startswith("s_cbranch") and ".L" in ln)
    label = lines[head].split()[-1] + ":"
    start = max(i for i in range(head) if lines[i].strip() == label)
    out, raised = lines[:start], False
    for ln in lines[start:head + 1]:
        op = ln.strip().split(" ")[0]
        if op.startswith("v_mfma") and not raised:
            out.append("  s_setprio 1")
            raised = True
        elif raised and op.startswith("v_") and not op.startswith("v_mfma"):
            out.append("  s_setprio 0")
            raised = False
        out.append(ln)
    return "\n".join(out + lines[head + 1:]) + "\n"


if __name__ == "__main__":
    os.environ.setdefault("TILEGCN_DEVICE", "emulator")
    main()
