"""Build the timing model's calibration set of foreign kernels (benchmark only; never a tilegcn dependency).

    /work/venvs/triton/bin/python bench/build_calibration.py OUT --gluon-src DIR [--aiter-src DIR]
    python3 bench/build_calibration.py OUT --hipkittens-src DIR      # clang-22, no ROCm, no Triton

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
  its MI300X int8 GEMMs, hsa/gfx950/fp8gemm_blockscale/*_{128x128,80x128}.co and hsa/gfx950/f4gemm/
  *_BpreShuffle_{256x256,128x512}.co, its MI355X fp8 blockscale and MXFP4 GEMMs, copied as they are
  (bench/calibration/aiter holds copies with aiter's licence, so the bench runs without this step).
- HazyResearch/HipKittens (a checkout or bare git dir in --hipkittens-src; MIT): the gfx950 bf16 GEMMs its
  analysis/bf16_gemm/mi350x/mi355x_bf16_gemm.json measured (analysis/bf16_gemm/mi350x/kernel_<n>.cpp, n =
  1024 ... 16384: kernel_8192.cpp is kernels/gemm/bf16fp32/mi350x/256_256_64_32_with16x32.cpp) and its gfx950
  attention forward, non-causal and causal (analysis/attn/fwd/benchmark/attn_fwd_{non_causal,causal}.cpp, bf16,
  head dim 128) at every shape of that folder's mi355x_benchmark.sh (-DATTN_B/H/H_KV/N as its Makefile passes
  them). Built WITHOUT ROCm, with Debian's clang-22 (`apt-get install -y clang-22`: clang, lld and the AMDGPU
  backend; nothing else is installed) as HIP device code: `-x hip --offload-arch=gfx950 --cuda-device-only
  -nogpulib -O3 -std=c++20` plus the flags of the kernel's Makefile, against bench/hipkittens_shim/, a minimal
  stand-in for the HIP headers the kernels include (device code as ROCm's headers define it; host entry points
  declared only). Three more objects are for the emulator tests only: the 8192 GEMM source with its
  `#define M/N/K 8192` set to 512, and the attention at 1 x 4 heads (2 KV heads) x 256 tokens (causal: 512).
  Not built: HipKittens' MI325X (gfx942) GEMMs (analysis/bf16_gemm/mi325x/*.cpp need the ThunderKittens-HIP
  submodule commit 5702ba0f, which is not public, and do not compile against HipKittens' include/), and its fp8
  GEMMs (kernels/gemm/fp8fp32: clang-22 spills 12 / 33 VGPRs to scratch, so the object would not be the kernel
  they measured).
Nothing here imports tilegcn: the Triton venv has no torch.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

GLUON_GEMMS = {  # output name: (source path in the repository, kernel function)
    "gluon_a16w16_v4.gfx950.hsaco": ("kernels/gemm/a16w16/v4_global_prefetch/matmul_kernel.py", "v4_global_prefetch"),
    "gluon_a16w16_v5.gfx950.hsaco": ("kernels/gemm/a16w16/v5_local_prefetch/matmul_kernel.py", "v5_local_prefetch"),
}
AITER_OBJECTS = {"aiter_bf16gemm_bf16_tn_256x256.gfx950.co": "hsa/gfx950/bf16gemm/bf16gemm_bf16_tn_256x256.co"}
AITER_OBJECTS.update({f"I8gemm_bf16_perTokenI8_BpreShuffle_{t}.gfx942.co":
                      f"hsa/gfx942/i8gemm/I8gemm_bf16_perTokenI8_BpreShuffle_{t}.co"
                      for t in ("16x128", "32x128", "48x128", "80x128", "112x256", "128x128")})
AITER_OBJECTS.update({f"fp8gemm_bf16_blockscale_BpreShuffle_{t}.gfx950.co":
                      f"hsa/gfx950/fp8gemm_blockscale/fp8gemm_bf16_blockscale_BpreShuffle_{t}.co"
                      for t in ("128x128", "80x128")})
AITER_OBJECTS.update({f"f4gemm_bf16_per1x32Fp4_BpreShuffle_{t}.gfx950.co":
                      f"hsa/gfx950/f4gemm/f4gemm_bf16_per1x32Fp4_BpreShuffle_{t}.co" for t in ("256x256", "128x512")})
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


# HipKittens (bench/calibration/hipkittens/README.md). Flags: those of the kernel's Makefile that reach device code.
HK_GEMM_SRC = "analysis/bf16_gemm/mi350x/kernel_{}.cpp"
HK_GEMM_FLAGS = ["-DKITTENS_CDNA4", "-DHIP_ENABLE_WARP_SYNC_BUILTINS", "-ffast-math"]  # mi350x/Makefile
HK_GEMM_SIZES = (1024, 2048, 4096, 8192, 16384)  # mi355x_benchmark.sh
HK_ATTN_SRC = "analysis/attn/fwd/benchmark/attn_fwd_non_causal.cpp"
HK_ATTN_FLAGS = ["-DKITTENS_CDNA4", "-ffast-math"]  # analysis/attn/fwd/benchmark/Makefile (CDNA4)
# (batch, heads, KV heads, tokens) of analysis/attn/fwd/benchmark/mi355x_benchmark.sh, non-causal, head dim 128
HK_ATTN_SHAPES = [(16, 64, 8, n) for n in (1024, 2048, 4096, 8192)] + [(15, 64, 8, 16384)] + \
                 [(16, 16, 16, n) for n in (1024, 2048, 4096, 8192, 16384)]
HK_ATTN_CAUSAL_SRC = "analysis/attn/fwd/benchmark/attn_fwd_causal.cpp"  # same Makefile, same shapes
HK_ATTN_CAUSAL_SHAPES = [(16, 64, 8, n) for n in (1024, 2048, 4096, 8192)] + [(15, 64, 8, 16384)] + \
                        [(16, 16, 16, n) for n in (1024, 2048, 4096, 8192)] + [(15, 16, 16, 16384)]
HK_TEST_GEMM = 512  # the emulator test's GEMM size (the 8192 source with M = N = K = 512)
HK_TEST_ATTN = (1, 4, 2, 256)  # the emulator test's attention (its head mapping needs heads = group^2 or group 1)
HK_TEST_ATTN_CAUSAL = (1, 4, 2, 512)


def hk_gemm_name(n):
    return f"hk_bf16_gemm_{n}.gfx950.co"


def hk_attn_name(b, h, hkv, n, causal=False):
    return f"hk_attn_fwd{'_causal' if causal else ''}_b{b}_h{h}_hkv{hkv}_n{n}.gfx950.co"


def build_hipkittens(src_root, out, manifest):
    """Compile HipKittens' gfx950 GEMMs and attention forward with clang-22 against bench/hipkittens_shim."""
    clang = shutil.which("clang-22") or sys.exit("clang-22 not found: apt-get install -y clang-22")
    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hipkittens_shim")
    commit = _commit(src_root)
    with tempfile.TemporaryDirectory() as tmp:
        root = _checkout(src_root, tmp, ["include", "analysis/bf16_gemm/mi350x", "analysis/attn/fwd/benchmark"])
        base = [clang, "-x", "hip", "--offload-arch=gfx950", "--cuda-device-only", "--no-gpu-bundle-output",
                "-nogpulib", "-nogpuinc", "-include", "__clang_hip_runtime_wrapper.h", "-O3", "-std=c++20", "-w",
                "-fuse-cuid=none",  # no per-path unit id symbol: the same source builds the same bytes
                "-I", shim, "-I", os.path.join(root, "include")]
        jobs = []
        for n in HK_GEMM_SIZES:
            rel = HK_GEMM_SRC.format(n)
            jobs.append((hk_gemm_name(n), rel, HK_GEMM_FLAGS, None, {"size": n, "tile": _gemm_tile(root, rel)}))
        rel = HK_GEMM_SRC.format(8192)
        jobs.append((hk_gemm_name(HK_TEST_GEMM), rel, HK_GEMM_FLAGS, HK_TEST_GEMM,
                     {"size": HK_TEST_GEMM, "tile": _gemm_tile(root, rel), "test_only": True}))
        attention = [(shape, False, shape == HK_TEST_ATTN) for shape in HK_ATTN_SHAPES + [HK_TEST_ATTN]]
        attention += [(shape, True, shape == HK_TEST_ATTN_CAUSAL)
                      for shape in HK_ATTN_CAUSAL_SHAPES + [HK_TEST_ATTN_CAUSAL]]
        for shape, causal, test_only in attention:
            defines = [f"-DATTN_{k}={v}" for k, v in zip(("B", "H", "H_KV", "N"), shape)] + ["-DATTN_D=128"]
            info = {"shape": list(shape), "causal": causal, "test_only": test_only}
            jobs.append((hk_attn_name(*shape, causal), HK_ATTN_CAUSAL_SRC if causal else HK_ATTN_SRC,
                         HK_ATTN_FLAGS + defines, None, info))
        for name, rel, flags, size, info in jobs:
            path = os.path.join(root, rel)
            if size is not None:  # the test object: the same source with its compile-time sizes set smaller
                path = _resized(path, size, tmp)
            subprocess.run(base + flags + [path, "-o", os.path.join(out, name)], check=True)
            manifest[name] = dict(info, source=f"HazyResearch/HipKittens {commit} {rel}",
                                  flags=" ".join(flags) + (f" (M = N = K = {size})" if size else ""),
                                  shared_mem=160000, built_with=_clang_version(clang))
            print(f"{name}: built")


def _gemm_tile(root, rel):
    """The workgroup's square output tile (`constexpr int BLOCK_SIZE`) of a HipKittens GEMM source."""
    return int(re.search(r"constexpr int BLOCK_SIZE\s*=\s*(\d+)", open(os.path.join(root, rel)).read())[1])


def _resized(path, size, tmp):
    """A copy of `path` in `tmp` whose `#define M/N/K <n>` read `size` (HipKittens fixes the GEMM's sizes at
    compile time)."""
    text = re.sub(r"^#define ([MNK]) \d+", rf"#define \1 {size}", open(path).read(), flags=re.M)
    copy = os.path.join(tmp, os.path.basename(path).replace(".cpp", f"_{size}.cpp"))
    with open(copy, "w") as f:
        f.write(text)
    return copy


def _checkout(src_root, tmp, paths):
    """A directory holding `paths` of the repository: `src_root` itself if it is a checkout, else (a bare git
    dir, the mirror) those paths of HEAD extracted into `tmp`."""
    if os.path.isdir(os.path.join(src_root, "include")):
        return src_root
    data = subprocess.run(["git", "--git-dir", src_root, "archive", "HEAD"] + paths, check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=data, check=True)
    return tmp


def _clang_version(clang):
    return subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def _commit(root):
    git = ["git", "--git-dir", root] if not os.path.isdir(os.path.join(root, ".git")) else ["git", "-C", root]
    done = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "(commit unknown)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gluon-src", help="checkout of ROCm/gfx950-gluon-tutorials")
    ap.add_argument("--aiter-src", help="checkout (or bare git dir) of ROCm/aiter")
    ap.add_argument("--hipkittens-src", help="checkout (or bare git dir) of HazyResearch/HipKittens")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "manifest.json")
    manifest = json.load(open(path)) if os.path.exists(path) else {}
    if args.gluon_src:
        build_gluon(args.gluon_src, args.out, manifest)
    if args.aiter_src:
        copy_aiter(args.aiter_src, args.out, manifest)
    if args.hipkittens_src:
        build_hipkittens(args.hipkittens_src, args.out, manifest)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
