"""CPU time of the hazard pass (tilegcn.compiler.insert_hazard_nops) on examples/gemm/gemm.py's 256x256x64 GEMM
(256x256x512, default config), per arch: the pass's input is captured from one lowering, then the pass alone is run
--repeat times (median and min of process time).

    python bench/hazard_pass_time.py [--repo OTHER_CHECKOUT] [--repeat 31]

--repo times another checkout's pass (e.g. main's) with the same script, for a side-by-side figure.
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent), help="checkout to time")
    ap.add_argument("--repeat", type=int, default=31, help="runs of the pass per arch")
    opts = ap.parse_args()
    repo = str(Path(opts.repo).resolve())
    sys.path[:0] = [repo, repo + "/tests"]
    import torch

    import tilegcn
    from tilegcn import compiler
    from tilegcn.language import trace

    assert tilegcn.__file__.startswith(repo), f"imported {tilegcn.__file__}, not {repo}'s tilegcn"
    gemm = importlib.import_module("examples.gemm.gemm").gemm
    args = [torch.randn(256, 512, dtype=torch.bfloat16), torch.randn(512, 256, dtype=torch.bfloat16),
            torch.empty(256, 256, dtype=torch.bfloat16)]
    the_pass = compiler.insert_hazard_nops
    for arch in ("gfx942", "gfx950"):
        calls = []

        def capture(insts, *rest, **kw):
            calls.append((list(insts), rest, kw))
            return the_pass(insts, *rest, **kw)

        compiler.insert_hazard_nops = capture
        try:
            _, trace_args = gemm._signature(args)
            compiler.lower(trace(gemm.fn, trace_args, gemm._constants({}), arch), arch)
        finally:
            compiler.insert_hazard_nops = the_pass
        insts, rest, kw = calls[0]
        times = []
        for _ in range(opts.repeat):
            t0 = time.process_time()
            out = the_pass(insts, *rest, **kw)
            times.append(time.process_time() - t0)
        print(f"{arch}: {len(insts)} instructions in, {len(out)} out; hazard pass median "
              f"{statistics.median(times) * 1e3:.2f} ms, min {min(times) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
