"""What verifying a cache entry costs on a disk hit (medians over --repeat loads).

    python bench/cache_verify.py [--repeat 200]

Compiles a GEMM (a large kernel.s) and an elementwise kernel into a temporary cache, then times per entry:
  read meta.json   reading and parsing meta.json alone (what any hit must do)
  load, verified   Cache.load(key): meta.json, its own digest, the sha256 of kernel.ir / kernel.s /
                   kernel.hsaco, the bytes kept in memory
  + jit's check    the same with the jit's check (kernel.ir is the key's IR, launch fields = traced kernel)
"""
from __future__ import annotations

import argparse
import atexit
import functools
import importlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
os.environ["TILEGCN_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilegcn-bench-cache-")
atexit.register(shutil.rmtree, os.environ["TILEGCN_CACHE_DIR"], ignore_errors=True)

import torch  # noqa: E402

import kernels  # noqa: E402
from tilegcn.cache import Cache  # noqa: E402
from tilegcn.ir import print_kernel  # noqa: E402
from tilegcn.language import trace  # noqa: E402

jitmod = importlib.import_module("tilegcn.jit")  # `tilegcn.jit` is the decorator


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    cases = [
        ("gemm 256x256x64 bf16", kernels.gemm,
         [torch.randn(256, 64, dtype=torch.bfloat16), torch.randn(64, 256, dtype=torch.bfloat16),
          torch.empty(256, 256, dtype=torch.bfloat16)], {}),
        ("axpb_relu 300x200 f32", kernels.axpb_relu, [torch.randn(300, 200), torch.empty(300, 200)], {}),
    ]
    cache = Cache()
    for label, fn, tensors, constants in cases:
        k = fn.compile(*tensors, arch="gfx950", **constants)
        signature, trace_args = fn._signature(tensors)
        traced = trace(fn.fn, trace_args, {**fn.defaults, **constants}, "gfx950")
        verify = functools.partial(jitmod._entry_problem, print_kernel(traced), traced, "gfx950")
        assert cache.load(k.key, verify) is not None
        sizes = ", ".join(f"{name} {len(data) / 1024:.0f} KiB" for name, data in cache.load(k.key).data.items())
        meta_ms = median_ms(lambda: json.loads(Path(k.cache_path, "meta.json").read_bytes()), args.repeat)
        load_ms = median_ms(lambda: cache.load(k.key), args.repeat)
        jit_ms = median_ms(lambda: cache.load(k.key, verify), args.repeat)
        print(f"{label} ({sizes})")
        print(f"  read meta.json    {meta_ms:7.3f} ms")
        print(f"  load, verified    {load_ms:7.3f} ms")
        print(f"  + jit's check     {jit_ms:7.3f} ms")


if __name__ == "__main__":
    main()
