"""Compile the hand-written HIP-style kernels of tests/corpus/ (bench/corpus/hip/*.ll) with LLVM's llc.

clang/hipcc are not available here, so the kernels are written as the LLVM IR hipcc produces (hidden
arguments for blockDim, 64-bit pointer arithmetic, __shared__ memory through generic pointers,
integer division) and compiled by LLVM's AMDGPU backend: code a kernel author brings, not tilegcn's.

    PYTHONPATH=$PWD python bench/corpus/make_hip_corpus.py [--out tests/corpus]

Writes NAME.ARCH.hsaco, NAME.ARCH.amdgcn (llc's assembly, for bench/checker_power.py) and NAME.ARCH.json
in the format of make_corpus.py.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile

from tilegcn.toolchain import find_llvm

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "tests", "corpus")
ARCHES = ("gfx942", "gfx950")


def T(name, shape, dtype, init="randn", out=False):
    return {"kind": "tensor", "name": name, "shape": list(shape), "dtype": dtype, "init": init, "output": out}


def S(name, value):
    return {"kind": "scalar", "name": name, "value": value}


M, N, K, n = 37, 45, 29, 1000
KERNELS = [
    # (name, source, kernel, grid, block, args, reference, atol, rtol)
    ("hip_intdiv", "hip_intdiv.ll", "intdiv", [-(-n // 256), 1, 1], [256, 1, 1],
     [T("a", [n], "int32", "randint_signed"), T("b", [n], "int32", "randint_nonzero"),
      T("out_q", [n], "int32", "zeros", True), T("out_r", [n], "int32", "zeros", True),
      T("out_u", [n], "int32", "zeros", True), S("d", 13), S("n", n)], "hip_intdiv", 0.0, 0.0),
    ("hip_gemm", "hip_gemm.ll", "gemm", [-(-N // 16), -(-M // 16), 1], [16, 16, 1],
     [T("A", [M, K], "float32"), T("B", [K, N], "float32"), T("C", [M, N], "float32", "zeros", True),
      S("M", M), S("N", N), S("K", K), S("lda", K), S("ldb", N), S("ldc", N), S("alpha", 1.5)],
     "hip_gemm", 1e-4, 1e-4),
    ("hip_flat_lds", "hip_flat_lds.ll", "flat_lds", [2, 1, 1], [256, 1, 1],
     [T("inp", [512], "float32"), T("out", [512], "float32", "zeros", True)], "hip_flat_lds", 0.0, 0.0),
]


def compile_ll(path, arch, out_dir, stem):
    llvm = find_llvm(arch)
    llc = llvm.tool("llc")
    base = [llc, "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-O2", path]
    subprocess.run(base + ["-o", os.path.join(out_dir, stem + ".amdgcn")], check=True)
    with tempfile.TemporaryDirectory() as d:
        obj = os.path.join(d, "k.o")
        subprocess.run(base + ["-filetype=obj", "-o", obj], check=True)
        subprocess.run([llvm.lld, "-shared", obj, "-o", os.path.join(out_dir, stem + ".hsaco")], check=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    a = ap.parse_args(argv)
    version = find_llvm().version
    for name, source, kernel, grid, block, args, ref, atol, rtol in KERNELS:
        for arch in ARCHES:
            stem = f"{name}.{arch}"
            compile_ll(os.path.join(HERE, "hip", source), arch, a.out, stem)
            meta = {"name": name, "arch": arch, "kernel": kernel, "compiler": f"llc {version} (HIP-style IR)",
                    "hsaco": stem + ".hsaco", "amdgcn": stem + ".amdgcn", "grid": grid, "block": block,
                    "shared_mem": 0, "args": args, "reference": ref, "atol": atol, "rtol": rtol}
            with open(os.path.join(a.out, stem + ".json"), "w") as f:
                json.dump(meta, f, indent=1)
                f.write("\n")
            print("built", stem)


if __name__ == "__main__":
    main()
