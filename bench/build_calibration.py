"""Build the timing model's calibration set of foreign kernels (benchmark only; never a tilegcn dependency).

    /work/venvs/triton/bin/python bench/build_calibration.py OUT --gluon-src DIR [--aiter-src DIR]

Writes code objects and OUT/manifest.json, which `bench/model_accuracy.py --calib OUT` reads. Each kernel is
another project's, built from its public source as that project builds it:
- ROCm/gfx950-gluon-tutorials (a checkout in --gluon-src; MIT): kernels/gemm/a16w16/v{4,5}_*/matmul_kernel.py,
  the tutorial's fp16 GEMMs whose published figures (kernels/gemm/a16w16/README.md, MI355, 4096x4096x8192)
  need no Triton branch of their own (the later versions need the tutorial's LLIR scheduler). Compiled with
  Triton 3.9 for gfx950 as their bench.py launches them: num_warps 4, 256x256x64 tiles, A (M, K) and B^T (N, K)
  row-major (stride_ak = stride_bk = stride_cn = 1, as Triton's launcher specialises unit strides), the other
  integer arguments divisible by 16. Their sources import torch for the host wrapper only: a stub stands in.
- ROCm/aiter (a checkout or bare git dir in --aiter-src; MIT): hsa/gfx950/bf16gemm/bf16gemm_bf16_tn_256x256.co,
  a precompiled hand-written assembly bf16 GEMM, and hsa/gfx942/i8gemm/I8gemm_bf16_perTokenI8_BpreShuffle_*.co,
  its MI300X int8 GEMMs, copied as they are (bench/calibration/aiter holds copies with aiter's licence, so the
  bench runs without this step).
Nothing here imports tilegcn: the Triton venv has no torch.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types

GLUON_GEMMS = {  # output name: (source path in the repository, kernel function)
    "gluon_a16w16_v4.gfx950.hsaco": ("kernels/gemm/a16w16/v4_global_prefetch/matmul_kernel.py", "v4_global_prefetch"),
    "gluon_a16w16_v5.gfx950.hsaco": ("kernels/gemm/a16w16/v5_local_prefetch/matmul_kernel.py", "v5_local_prefetch"),
}
AITER_OBJECTS = {"aiter_bf16gemm_bf16_tn_256x256.gfx950.co": "hsa/gfx950/bf16gemm/bf16gemm_bf16_tn_256x256.co"}
AITER_OBJECTS.update({f"I8gemm_bf16_perTokenI8_BpreShuffle_{t}.gfx942.co":
                      f"hsa/gfx942/i8gemm/I8gemm_bf16_perTokenI8_BpreShuffle_{t}.co"
                      for t in ("16x128", "32x128", "48x128", "80x128", "112x256", "128x128")})
AITER_OBJECTS.update({"fwd_hd128_bf16_rtne.MI300.gfx942.co": "hsa/gfx942/fmha_v3_fwd/MI300/fwd_hd128_bf16_rtne.co",
                      "fwd_hd128_bf16.gfx950.co": "hsa/gfx950/fmha_v3_fwd/fwd_hd128_bf16.co"})


def build_gluon(src_root, out, manifest):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sys.modules.setdefault("torch", types.ModuleType("torch"))
    names = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
             "stride_cm", "stride_cn", "BLOCK_M", "BLOCK_N", "BLOCK_K")
    consts = {"stride_ak": 1, "stride_bk": 1, "stride_cn": 1, "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64}
    sig = {n: "constexpr" if n in consts else "*fp16" if n.endswith("_ptr") else "i32" for n in names}
    aligned = [i for i, n in enumerate(names) if n not in consts]
    for name, (rel, fn) in GLUON_GEMMS.items():
        spec = importlib.util.spec_from_file_location(fn, os.path.join(src_root, rel))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        src = GluonASTSource(getattr(module, fn), sig, consts, {(i,): [["tt.divisibility", 16]] for i in aligned})
        k = triton.compile(src, target=GPUTarget("hip", "gfx950", 64), options={"num_warps": 4})
        with open(os.path.join(out, name), "wb") as f:
            f.write(k.asm["hsaco"])
        manifest[name] = {"source": f"ROCm/gfx950-gluon-tutorials {_commit(src_root)} {rel}",
                          "shared_mem": k.metadata.shared, "built_with": f"triton {triton.__version__}"}
        print(f"{name}: {k.metadata.shared} B LDS")


def copy_aiter(src_root, out, manifest):
    for name, rel in AITER_OBJECTS.items():
        path = os.path.join(src_root, rel)
        if os.path.exists(path):
            shutil.copyfile(path, os.path.join(out, name))
        else:  # a bare git dir (the mirror)
            data = subprocess.run(["git", "--git-dir", src_root, "show", f"HEAD:{rel}"], check=True,
                                  capture_output=True).stdout
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
        manifest[name] = {"source": f"ROCm/aiter {_commit(src_root)} {rel}", "shared_mem": 0}
        print(f"{name}: copied")


def _commit(root):
    git = ["git", "--git-dir", root] if not os.path.isdir(os.path.join(root, ".git")) else ["git", "-C", root]
    done = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "(commit unknown)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gluon-src", help="checkout of ROCm/gfx950-gluon-tutorials")
    ap.add_argument("--aiter-src", help="checkout (or bare git dir) of ROCm/aiter")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "manifest.json")
    manifest = json.load(open(path)) if os.path.exists(path) else {}
    if args.gluon_src:
        build_gluon(args.gluon_src, args.out, manifest)
    if args.aiter_src:
        copy_aiter(args.aiter_src, args.out, manifest)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
