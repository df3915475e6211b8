"""Dump the `.s` of the test and example kernels (both arches, num_stages 1/2/3, NN/NT) into a folder, so that
two checkouts' outputs can be diffed (a compile-time change must leave the generated code byte-identical).

    cd CHECKOUT && PYTHONPATH=$PWD python /path/to/bench/dump_asm.py OUT_DIR
    diff -r OUT_A OUT_B

Kernels are imported from the current directory's tests/kernels.py and examples/ (run it from the checkout
under test). Configs the compiler refuses (e.g. stages that need more LDS than the arch has) record the error.
"""
from __future__ import annotations

import os
import sys

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]

import torch  # noqa: E402

import kernels  # noqa: E402
from examples.elementwise import __dict__ as elementwise_module  # noqa: E402
from examples.gemm.gemm import gemm as gemm_256  # noqa: E402
from tilegcn import compiler  # noqa: E402
from tilegcn.errors import TilegcnError  # noqa: E402
from tilegcn.language import trace  # noqa: E402

bf16 = torch.bfloat16


def gemm_cases():
    for name, fn, m, n in (("gemm256", gemm_256, 256, 256), ("gemm128", kernels.gemm, 128, 128),
                           ("gemm_bias_relu", kernels.gemm_bias_relu, 128, 128)):
        for stages in (1, 2, 3):
            for layout in ("NN", "NT"):
                a = torch.empty(m, 512, dtype=bf16)
                b = torch.empty(*((n, 512) if layout == "NT" else (512, n)), dtype=bf16)
                args = [a, b] + ([torch.empty(n, dtype=bf16)] if fn is kernels.gemm_bias_relu else []) + \
                    [torch.empty(m, n, dtype=bf16)]
                yield f"{name}_s{stages}_{layout}", fn, args, dict(num_stages=stages, transpose_B=layout == "NT")


def other_cases():
    x = torch.empty(1024, 1024)
    yield "copy2d_bf16", kernels.copy2d, [x.bfloat16(), x.bfloat16()], {}
    yield "axpb_relu", kernels.axpb_relu, [x, x.clone()], {}
    for attr, value in elementwise_module.items():
        if hasattr(value, "fn") and hasattr(value, "_signature"):
            yield f"examples_{attr}", value, [x, x.clone()], {}


def main(out_dir: str):
    os.makedirs(out_dir, exist_ok=True)
    for arch in ("gfx942", "gfx950"):
        for name, fn, args, constants in list(other_cases()) + list(gemm_cases()):
            _, trace_args = fn._signature(args)
            try:
                kernel = trace(fn.fn, trace_args, fn._constants(dict(constants)), arch)
                text = compiler.lower(kernel, arch).asm
            except TilegcnError as e:
                text = f"refused: {type(e).__name__}: {e}\n"
            with open(os.path.join(out_dir, f"{arch}_{name}.s"), "w") as f:
                f.write(text.replace(os.getcwd() + os.sep, ""))  # source paths relative to the checkout


if __name__ == "__main__":
    main(sys.argv[1])
