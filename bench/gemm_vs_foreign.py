"""tilegcn's GEMM beside the foreign GEMMs of the calibration set at SIZE^3 under the timing model, in one run.

    python bench/gemm_vs_foreign.py [--card MI355X|MI300X] [--calib DIR] [--size 8192] [--transpose-b]

Per card it prints the model's limit and, per kernel, the model's cycles, TFLOP/s, MFMA-busy %, its fraction of
the limit and its ratio to tilegcn's best config:
- the limit: every SIMD's matrix pipe busy from the launch to the end, i.e. the launch overhead
  (`Timing.launch_overhead_clk`) plus the FLOPs at the arch's best 16-bit MFMA rate on all CUs, in TFLOP/s at the
  card's sustained clock (`Timing.clock_hz`);
- tilegcn: examples/gemm/gemm.py (bf16, B stored (K, N), or (N, K) with --transpose-b as the foreign GEMMs read
  it, T.use_swizzle) at CONFIGS: the 256x256x64 tile at 8 waves and num_stages=2 with its K loop as a ping-pong and
  in step (`ping_pong`), the 256x128 and 128x256 tiles at 8 waves, the 256x256 tile at 4 waves, and the 128x128
  tile at num_stages 2 and 1 (the MI300X tile ranking's best before the gfx942 ping-pong);
  configs the compiler refuses (registers, LDS) say why;
- foreign: every 16-bit GEMM of bench/model_accuracy.py's FOREIGN list (an (M, N, K) entry, no 8-bit name) that
  runs on the card and whose code object is at hand (aiter's bf16 256x256 kernel in bench/calibration/aiter; the
  Gluon tutorial's fp16 v4 / v5 with --calib DIR, from bench/build_calibration.py; any GEMM the list gains, such as
  HipKittens' compiled per size), launched at SIZE^3 as model_accuracy.py's `foreign_estimate` launches it (the
  same MFMA rate for fp16 and bf16).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench"), os.path.join(ROOT, "examples", "gemm")]

import model_accuracy  # noqa: E402
from gemm import gemm  # noqa: E402
from tilegcn import TilegcnError  # noqa: E402
from tilegcn.amdgcn.arch import TIMING, get_arch  # noqa: E402

# (block_M, block_N, threads, num_stages, ping_pong): the K loop's ping-pong applies to 8 waves at num_stages=2
CONFIGS = ((256, 256, 512, 2, None), (256, 256, 512, 2, False), (256, 128, 512, 2, None), (128, 256, 512, 2, None),
           (256, 256, 256, 2, None), (128, 128, 256, 2, None), (128, 128, 256, 1, None))
LOW_PRECISION = ("i8", "fp8", "f8", "fp4", "f4", "mx")  # name parts of FOREIGN GEMMs on 8-bit or narrower operands


def arch_of(card: str) -> str:
    return next(name for name, t in TIMING.items() if t.device == card)


def limit_cycles(card: str, flops: float) -> float:
    """The model's floor for `flops` of 16-bit MFMA work on `card` (see the module docstring)."""
    t, arch = TIMING[arch_of(card)], get_arch(arch_of(card))
    per_clk = max(2 * s.M * s.N * s.K / (s.passes * t.issue_slot_clk) for s in arch.mfma_shapes["bf16"])
    return t.launch_overhead_clk + flops / (per_clk * t.simds_per_cu * t.cus)


def tilegcn_rows(card: str, size: int, transpose_b: bool = False) -> list:
    """[(label, estimate or the refusal's text)] of CONFIGS; `transpose_b`: B stored (N, K)."""
    arch = arch_of(card)
    a = torch.zeros(size, size, dtype=torch.bfloat16)
    rows = []
    for block_M, block_N, threads, stages, ping_pong in CONFIGS:
        label = f"tilegcn {block_M}x{block_N}x64 {threads} thr num_stages={stages}" + \
            ("" if ping_pong is None else f" ping_pong={ping_pong}")
        try:
            k = gemm.compile(a, a, a, block_M=block_M, block_N=block_N, num_stages=stages, threads=threads,
                             ping_pong=ping_pong, arch=arch, transpose_B=transpose_b)
            rows.append((label + _loop_shape(k.asm), k.estimate(device=card, args=[a, a.clone(), a.clone()])))
        except TilegcnError as err:
            rows.append((label, "refused: " + str(err).split(": ", 1)[-1][:100]))
    return rows


def _loop_shape(asm: str) -> str:
    """' (ping-pong)' where the kernel's K loop runs its wave groups apart (a wave-group barrier), else ''."""
    return " (ping-pong)" if "wave group 1's extra barrier" in asm else ""


def foreign_rows(card: str, size: int, folder) -> list:
    """[(label, estimate)] of the card's 16-bit foreign GEMMs at size^3 (model_accuracy.FOREIGN, one per kernel)."""
    rows, seen = [], set()
    for kernel, shape, *_ in model_accuracy.FOREIGN:
        if kernel in seen or not is_16_bit_gemm(kernel, shape) or model_accuracy.foreign_device(kernel) != card:
            continue
        seen.add(kernel)
        est = model_accuracy.foreign_estimate(kernel, (size, size, size), folder)
        if est is None:
            print(f"  {kernel}: no code object (bench/build_calibration.py, then --calib DIR)")
            continue
        rows.append((f"{kernel} (foreign)", est))
    return rows


def is_16_bit_gemm(kernel: str, shape: tuple) -> bool:
    """A FOREIGN entry of a GEMM (shape (M, N, K); attention's are (batch, heads, ...) of 4) on 16-bit operands."""
    return len(shape) == 3 and not any(part in kernel for part in LOW_PRECISION)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--card", default="MI355X", choices=sorted(t.device for t in TIMING.values()))
    p.add_argument("--calib", default=None, help="folder of bench/build_calibration.py's code objects")
    p.add_argument("--size", type=int, default=8192, help="M = N = K")
    p.add_argument("--transpose-b", action="store_true", help="tilegcn's B stored (N, K), as the foreign GEMMs read it")
    args = p.parse_args(argv)
    flops = 2.0 * args.size ** 3
    t = TIMING[arch_of(args.card)]
    floor = limit_cycles(args.card, flops)
    limit_tflops = flops / (floor / t.clock_hz) / 1e12
    layout = "(N, K)" if args.transpose_b else "(K, N)"
    print(f"{args.card}, {args.size}^3 16-bit GEMM, B {layout}, timing model at {t.clock_hz / 1e9:.2f} GHz: limit "
          f"{floor / 1e6:.3f} M cycles = {limit_tflops:.0f} TFLOP/s (every matrix pipe busy from launch to end)")
    start = time.perf_counter()
    rows = tilegcn_rows(args.card, args.size, args.transpose_b)
    best = min((e.cycles for _, e in rows if not isinstance(e, str)), default=None)
    rows += foreign_rows(args.card, args.size, args.calib)
    print(f"{'kernel':64} {'M cycles':>9} {'TFLOP/s':>8} {'MFMA %':>7} {'of limit':>9} {'vs best tilegcn':>16}")
    for label, est in rows:
        if isinstance(est, str):
            print(f"{label:64} {est}")
            continue
        vs = f"{best / est.cycles:.3f}x" if best else "-"
        print(f"{label:64} {est.cycles / 1e6:>9.3f} {est.tflops:>8.0f} {est.breakdown['mfma_busy_pct']:>6.1f}% "
              f"{floor / est.cycles:>8.1%} {vs:>16}")
    print(f"({time.perf_counter() - start:.0f} s; 'vs best tilegcn' > 1: the kernel takes fewer cycles than tilegcn's "
          "best config)")


if __name__ == "__main__":
    os.environ.setdefault("TILEGCN_DEVICE", "emulator")
    main()
