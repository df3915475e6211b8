"""Row softmax and RMSNorm on 8192x8192 bf16: the timing model's estimate next to the HBM roofline.

    PYTHONPATH=$PWD python bench/row_kernels.py [--shape 8192 8192] [--arch gfx942 gfx950]

Per kernel and device (MI300X for gfx942, MI355X for gfx950): the model's time (`CompiledKernel.estimate()`,
docs/timing.md), the bytes the operation must move at least (read X, write Y, and W for RMSNorm: every kernel is
measured against the same bytes, so a kernel that reads X twice shows it as a lower share), the roofline time
(those bytes over the arch table's peak HBM bandwidth, `hbm_tbps` in tilegcn/amdgcn/arch.py) and the share of HBM
bandwidth the kernel reaches by the model (roofline time / model time). Issue 19 asks >= 80 % for the bf16 row
softmax and RMSNorm. The kernels: a row copy with the same loads and stores and no math (the baseline: what the
model gives pure streaming in this shape), the tutorials' (examples/tutorials/fused_softmax.py, rms_norm.py at their
defaults: 4 and 8 rows per workgroup handled one after another, 256 threads) and TileLang's ports (examples/tilelang/online_softmax.py, rms_norm.py), unchanged.
A kernel the compiler refuses is printed with the reason. Figures and the command are recorded in
docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent

import tilegcn  # noqa: E402
from tilegcn import language as T  # noqa: E402
from tilegcn.amdgcn.arch import TIMING, get_arch  # noqa: E402
from tilegcn.errors import TilegcnError  # noqa: E402


def _example(path: str):
    """An example file as a module (examples/tutorials/rms_norm.py and examples/tilelang/rms_norm.py share a name)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.replace("/", "_")[:-3], REPO / "examples" / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@tilegcn.jit
def row_copy(X, Y, *, block_M=1, threads=256):
    """The baseline: the softmax's loads and stores with nothing between them (what the model gives streaming)."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), "float32")
        T.copy(X[bx * block_M, 0], x)
        T.copy(x, Y[bx * block_M, 0])


def _kernels(M: int, N: int):
    """(name, compile(arch) -> CompiledKernel, minimal bytes) per benchmarked kernel."""
    bf16 = torch.bfloat16
    x, y, w = torch.zeros(M, N, dtype=bf16), torch.zeros(M, N, dtype=bf16), torch.zeros(N, dtype=bf16)
    softmax_bytes = 2 * M * N * 2
    rms_bytes = softmax_bytes + N * 2
    softmax, rms_norm = _example("tutorials/fused_softmax.py").softmax, _example("tutorials/rms_norm.py").rms_norm
    online_softmax = _example("tilelang/online_softmax.py").softmax_kernel
    tilelang_rms_norm = _example("tilelang/rms_norm.py").rms_norm
    return [
        ("row copy (baseline, no math)", lambda arch: row_copy.compile(x, y, arch=arch), softmax_bytes),
        ("softmax (tutorial)", lambda arch: softmax.compile(x, y, arch=arch), softmax_bytes),
        ("RMSNorm (tutorial)", lambda arch: rms_norm.compile(x, w, y, arch=arch), rms_bytes),
        ("online softmax (TileLang port)",
         lambda arch: online_softmax.compile(x, y, dtype=bf16, arch=arch), softmax_bytes),
        ("RMSNorm (TileLang port, blk_m=1)", lambda arch: tilelang_rms_norm.compile(x, y, 1, arch=arch),
         softmax_bytes),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=2, default=(8192, 8192), metavar=("M", "N"))
    parser.add_argument("--arch", nargs="+", default=["gfx942", "gfx950"])
    args = parser.parse_args(argv)
    M, N = args.shape
    print(f"bf16 {M}x{N}: timing-model estimate vs the HBM roofline (minimal bytes / peak HBM bandwidth)")
    print(f"{'kernel':34} {'device':7} {'model us':>9} {'roofline us':>11} {'HBM share':>9}  {'VGPRs':>5}  note")
    for name, build, nbytes in _kernels(M, N):
        for arch in args.arch:
            device = TIMING[arch].device
            roofline = nbytes / (get_arch(arch).hbm_tbps * 1e12)
            t0 = time.perf_counter()
            try:
                kernel = build(arch)
                est = kernel.estimate()
            except TilegcnError as e:
                print(f"{name:34} {device:7} {'-':>9} {roofline * 1e6:11.1f} {'-':>9}  {'-':>5}  refused: "
                      f"{getattr(e, 'raw_message', str(e)).splitlines()[0][-100:]}")
                continue
            share = roofline / est.seconds
            print(f"{name:34} {device:7} {est.seconds * 1e6:9.1f} {roofline * 1e6:11.1f} {share:9.1%}  "
                  f"{kernel.metadata['vgprs']:5d}  limited by {est.breakdown['limiting']}; "
                  f"{time.perf_counter() - t0:.0f} s to compile and estimate")


if __name__ == "__main__":
    main()
