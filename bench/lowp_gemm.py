"""fp8 / MXFP4 / MXFP8 GEMM at 8192^3: the timing model's TFLOP/s for tilegcn and Triton 3.9, beside published figures.

    PYTHONPATH=$PWD python bench/lowp_gemm.py [--triton DIR] [--arch gfx950,gfx942] [--quick]

Issue 22's must-show: the model's TFLOP/s at M = N = K = 8192 of
(a) tilegcn's fp8 T.gemm (tests/kernels.py `gemm` on the arch's e4m3, B K-major, C bf16; bench/loop_metrics.py
    compiles the same kernel) at each tile config of TILEGCN_CONFIGS; the best by the model is marked `*`; on gfx950
    also its MX-scaled T.gemm (tests/kernels.py `mx_gemm`: packed fp4 or e4m3 operands with E8M0 scales per 32 K,
    B K-major, C bf16) at each config of MX_CONFIGS;
(b) Triton 3.9's fp8 matmul and (c, gfx950 only) its `tl.dot_scaled` MXFP4 matmul, from the code objects that
    bench/triton_lowp.py writes into DIR (run it first with /work/venvs/triton/bin/python; not committed);
    each config of its manifest is estimated, the best by the model marked `*`;
(d, gfx950) aiter's assembly MXFP4 GEMM code object (bench/calibration/aiter) at the tile aiter's tuned CSV ran at
    8192^3, beside tilegcn's MX rows (marked `*` with them when the model puts it first).
MI355X for gfx950, MI300X for gfx942 (each arch's device in tilegcn.amdgcn.arch.TIMING). The published figures
(issue 22) are printed beside them: measurements on MI355X; none of them set a model parameter. They are other
kernels (HipKittens, hipBLASLt, Gluon, aiter assembly, FlyDSL), one at another shape (Gluon fp8:
4096x4096x16384): the comparison says where the model puts tilegcn and Triton against the best published
kernels, not an error of the model. `--quick`: one tilegcn config per arch. Results: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench"), str(REPO / "tests")]

import torch  # noqa: E402

from loop_metrics import gemm_kernel  # noqa: E402
from tilegcn.amdgcn.arch import TIMING, get_arch  # noqa: E402
from tilegcn.perfmodel import estimate  # noqa: E402

SIZE = 8192
# (BM, BN, BK, num_stages, threads): tilegcn fp8 tiles (BK in elements); the first is the --quick one
# (threads 512: 8 waves, the ping-pong K loop by default: LDS DMA on gfx950, register-staged on gfx942)
TILEGCN_CONFIGS = [(256, 256, 128, 2, 256), (256, 256, 64, 2, 256), (256, 128, 128, 2, 256),
                   (128, 128, 128, 2, 256), (256, 256, 128, 1, 256), (256, 256, 128, 2, 512),
                   (256, 256, 64, 2, 512)]
# (what, kernel, TFLOP/s, shape): issue 22's published MI355X figures
PUBLISHED = {
    "fp8": [("HipKittens fp8 GEMM", 3327, "8192^3"), ("hipBLASLt fp8 GEMM", 3233, "8192^3"),
            ("Gluon fp8 GEMM", 3383, "4096x4096x16384")],
    "mxfp4": [("aiter assembly MXFP4", 5096, "8192^3"), ("FlyDSL MXFP4", 5033, "8192^3"),
              ("Gluon MXFP4", 5255, "8192^3"), ("Triton tl.dot_scaled MXFP4", 3300, "8192^3 (about)")],
}
# (BM, BN, BK, num_stages, threads) of tilegcn's MX-scaled T.gemm, BK in values; the first is the --quick one
MX_CONFIGS = {"mxfp4": [(256, 256, 256, 2, 256), (256, 128, 256, 2, 256), (128, 128, 256, 2, 256),
                        (256, 256, 128, 2, 256), (256, 256, 256, 2, 512), (256, 256, 128, 2, 512)],
              "mxfp8": [(256, 256, 128, 2, 256), (256, 128, 128, 2, 256), (128, 128, 256, 2, 256),
                        (256, 256, 64, 2, 256), (256, 256, 128, 2, 512), (256, 256, 64, 2, 512)]}
FLOPS = 2 * SIZE ** 3


def tilegcn_rows(arch, configs, dtype="fp8"):
    """[(label, estimate or error text)] of tilegcn's `dtype` GEMM (fp8, mxfp4, mxfp8) at each config."""
    rows = []
    for bm, bn, bk, stages, threads in configs:
        label = f"tilegcn {dtype} T.gemm {bm}x{bn}x{bk} stages={stages} threads={threads}"
        try:
            k = gemm_kernel(arch, (bm, bn, bk), "NT", stages, (SIZE,) * 3, threads=threads, dtype=dtype)
            rows.append((label, k.estimate(device=TIMING[arch].device, flops=FLOPS)))
        except Exception as exc:  # a config that does not fit (LDS, registers) is reported, not fatal
            rows.append((label, f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"))
    return rows


def triton_args(kind, arch):
    """The launch arguments of bench/triton_lowp.py's kernels at SIZE^3 (zeros: values do not change the timing),
    and Triton's two scratch pointers."""
    scratch = [torch.zeros(16, dtype=torch.uint8)] * 2
    if kind == "fp8":
        e4 = getattr(torch, get_arch(arch).fp8_dtypes[0])
        a, b_t = (torch.zeros(SIZE, SIZE, dtype=e4) for _ in range(2))
        return [a, b_t, torch.zeros(SIZE, SIZE, dtype=torch.bfloat16), SIZE, SIZE, SIZE] + scratch
    a, b_t = (torch.zeros(SIZE, SIZE // 2, dtype=torch.uint8) for _ in range(2))
    scale_a, scale_b = (torch.full((SIZE, SIZE // 32), 127, dtype=torch.uint8) for _ in range(2))
    return [a, scale_a, b_t, scale_b, torch.zeros(SIZE, SIZE, dtype=torch.float32), SIZE, SIZE, SIZE] + scratch


def triton_rows(folder, kind, arch):
    """[(label, estimate or error text)] of bench/triton_lowp.py's `kind` kernels for `arch` in `folder`."""
    from tilegcn.runtime import emulator

    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    rows = []
    for file, m in manifest.items():
        if m["kind"] != kind or m["arch"] != arch:
            continue
        label = (f"Triton {m['compiler'].split()[-1]} {'fp8 tl.dot' if kind == 'fp8' else 'tl.dot_scaled MXFP4'} "
                 f"{m['BM']}x{m['BN']}x{m['BK']} w{m['num_warps']} s{m['num_stages']}")
        try:
            mod = emulator.load(open(os.path.join(folder, file), "rb").read(), arch=arch)
            grid = ((SIZE // m["BM"]) * (SIZE // m["BN"]), 1, 1)
            rows.append((label, estimate(mod, m["kernel"], grid, tuple(m["block"]), triton_args(kind, arch),
                                         device=TIMING[arch].device, shared_mem=m["shared_mem"], flops=FLOPS)))
        except Exception as exc:  # an object the emulator stops at is reported, not fatal
            rows.append((label, f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"))
    return rows


# aiter's assembly MXFP4 GEMM at SIZE^3: the tile its tuned CSV ran there (aiter/configs/a4w4_blockscale_tuned_gemm.csv,
# ROCm/aiter e4048607: f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256, unsplit, 5,089.97 TFLOP/s); its code object and
# launch are bench/model_accuracy.py's (bench/calibration/aiter)
AITER_MXFP4_TILE = "256x256"


def aiter_rows():
    """[(label, estimate or error text)] of aiter's MXFP4 GEMM code object at SIZE^3 on MI355X."""
    from model_accuracy import aiter_lowp_estimate

    label = f"aiter assembly MXFP4 f4gemm {AITER_MXFP4_TILE} (its tuned CSV's tile)"
    try:
        return [(label, aiter_lowp_estimate("f4", AITER_MXFP4_TILE, SIZE, SIZE, SIZE))]
    except Exception as exc:  # reported, not fatal
        return [(label, f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}")]


def print_rows(rows):
    """Model rows (best by the model marked *), TFLOP/s and MFMA-busy %."""
    good = [est.tflops for _, est in rows if not isinstance(est, str)]
    for label, est in rows:
        if isinstance(est, str):
            print(f"  {label:62} {'-':>9}  {est}")
            continue
        mark = "*" if est.tflops == max(good) else " "
        print(f"{mark} {label:62} {est.tflops:>9,.0f}  mfma {est.breakdown['mfma_busy_pct']:.0f}%, "
              f"{est.cycles / 1e6:.2f} M cycles")


def print_published(kind):
    for what, tflops, shape in PUBLISHED[kind]:
        print(f"  {'published, MI355X: ' + what + ' ' + shape:62} {tflops:>9,}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triton", metavar="DIR", help="bench/triton_lowp.py's output (Triton rows are left out without)")
    ap.add_argument("--arch", default="gfx950,gfx942")
    ap.add_argument("--quick", action="store_true", help="one tilegcn config per arch")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    configs = TILEGCN_CONFIGS[:1] if args.quick else TILEGCN_CONFIGS
    for arch in args.arch.split(","):
        device = TIMING[arch].device
        print(f"== {arch} ({device}), fp8 GEMM {SIZE}^3: model TFLOP/s")
        print_rows(tilegcn_rows(arch, configs))
        if args.triton:
            print_rows(triton_rows(args.triton, "fp8", arch))
        if arch == "gfx950":
            print_published("fp8")
            print(f"== {arch} ({device}), MXFP4 GEMM {SIZE}^3: model TFLOP/s")
            print_rows(tilegcn_rows(arch, MX_CONFIGS["mxfp4"][:1] if args.quick else MX_CONFIGS["mxfp4"], "mxfp4")
                       + aiter_rows())
            if args.triton:
                print_rows(triton_rows(args.triton, "mxfp4", arch))
            print_published("mxfp4")
            print(f"== {arch} ({device}), MXFP8 GEMM {SIZE}^3: model TFLOP/s")
            print_rows(tilegcn_rows(arch, MX_CONFIGS["mxfp8"][:1] if args.quick else MX_CONFIGS["mxfp8"], "mxfp8"))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    os.environ.setdefault("TILEGCN_DEVICE", "emulator")
    main()
