"""TileLang's split-K GEMM (examples/tilelang/gemm_splitk*.py) at upstream's shape, 1024^3 fp16 -> fp32 with 128 x 128 x
32 tiles and split_k=4, by the timing model: the element form (T.atomic_add in T.Parallel) and the tile form, next
to split_k=1 (each output tile summed over all of K by one workgroup, still stored by atomic adds).

    PYTHONPATH=$PWD python bench/splitk_estimate.py

Prints per arch the VGPRs, the atomics per thread and the model's cycles and limit (`CompiledKernel.estimate()`,
docs/timing.md). The model counts a buffer atomic as a vector memory access of its width.
"""
import pathlib
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "examples" / "tilelang"))

import gemm_splitk  # noqa: E402
import gemm_splitk_vectorize_atomicadd  # noqa: E402


def _summary(estimate) -> str:
    lines = str(estimate).splitlines()
    cycles = next(line for line in lines if line.strip().startswith("cycles"))
    limit = next(line for line in lines if line.strip().startswith("limited by"))
    return f"{cycles.split(None, 1)[1].strip()}; {limit.strip()}"


def main():
    a, b, c = torch.randn(1024, 1024).half(), torch.randn(1024, 1024).half(), torch.zeros(1024, 1024)
    for arch in ("gfx942", "gfx950"):
        for name, module, split_k in (("element", gemm_splitk, 4), ("tile", gemm_splitk_vectorize_atomicadd, 4),
                                      ("tile", gemm_splitk_vectorize_atomicadd, 1)):
            k = module.matmul.compile(a, b, c, 128, 128, 32, split_k, arch=arch)
            atomics = sum(line.lstrip().startswith("buffer_atomic") for line in k.asm.splitlines())
            print(f"{arch} {name:7s} split_k={split_k}: {k.metadata['vgprs']} VGPRs, {atomics} atomics/thread, "
                  f"{_summary(k.estimate())}")


if __name__ == "__main__":
    main()
