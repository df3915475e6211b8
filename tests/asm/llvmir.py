"""LLVM IR -> code object with LLVM's own compiler (llc + ld.lld), for tests that need kernels written
the way HIP's compiler writes them (hidden arguments, dispatch pointer, dynamic LDS, structs)."""
from __future__ import annotations

import functools
import os
import subprocess
import tempfile

import pytest

from tilegcn.toolchain import find_llvm

IR_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "ir")


@functools.lru_cache(maxsize=None)
def compile_ir(name: str, arch: str = "gfx942") -> bytes:
    """tests/ir/<name>.ll compiled for `arch` and linked into a code object (skips without llc)."""
    llvm = find_llvm(arch)
    llc, lld = llvm.tool("llc"), llvm.lld
    if llc is None:
        pytest.skip("this LLVM has no llc")
    with tempfile.TemporaryDirectory() as d:
        obj, out = os.path.join(d, "k.o"), os.path.join(d, "k.hsaco")
        subprocess.run([llc, "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-O2", "-filetype=obj",
                        os.path.join(IR_DIR, f"{name}.ll"), "-o", obj], check=True, capture_output=True)
        subprocess.run([lld, "-shared", obj, "-o", out], check=True, capture_output=True)
        with open(out, "rb") as f:
            return f.read()
