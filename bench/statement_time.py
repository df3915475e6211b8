"""Where the statement lowering of a GEMM goes: CPU time (process time) of `lower_statements` per statement kind,
SymPy memos emptied before each lowering (as `bench/compile_time.py --breakdown`, whose `statements` part this
splits), medians over --repeat lowerings.

    python bench/statement_time.py [--repeat 7] [--arch gfx950]

Kinds: pipelined async copies (LDS DMA or register loads), wait groups (a register-staged copy's deferred LDS
writes), T.gemm (fragment reads and MFMAs), other copies (the accumulator epilogue; at num_stages=1 also the K loop's
global -> shared copies), the rest (T.clear, T.Parallel, the loops' own instructions). Kernels: the README's 256x256x64 GEMM
tile on a 256x256x512 problem (NN at three configs, NT), tests/kernels.py's gemm_bias_relu (128x128x64 tile,
num_stages=2), and two elementwise kernels (axpb_relu, copy2d), so a change can be checked for slowing any of them.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import torch  # noqa: E402

import kernels  # noqa: E402
from examples.gemm.gemm import gemm  # noqa: E402
from tilegcn import compiler  # noqa: E402
from tilegcn.amdgcn import symcache  # noqa: E402
from tilegcn.errors import ResourceError  # noqa: E402
from tilegcn.language import trace  # noqa: E402

KINDS = {"lower_async_copy": "async copies", "lower_wait_group": "wait groups", "lower_gemm": "gemm",
         "lower_copy": "other copies"}

def cases():
    """(label, JITFunction, arguments, constants) of every measured kernel."""
    bf16 = torch.bfloat16
    a, b, c = torch.empty(256, 512, dtype=bf16), torch.empty(512, 256, dtype=bf16), torch.empty(256, 256, dtype=bf16)
    x = torch.empty(1024, 1024)
    return [("gemm NN, num_stages=2, 256 threads", gemm, [a, b, c], dict(num_stages=2, threads=256)),
            ("gemm NN, num_stages=1, 512 threads", gemm, [a, b, c], {}),
            ("gemm NN, num_stages=2, 512 threads", gemm, [a, b, c], dict(num_stages=2)),
            ("gemm NT, num_stages=2, 256 threads", gemm, [a, b.T.contiguous(), c],
             dict(num_stages=2, threads=256, transpose_B=True)),
            ("gemm_bias_relu 128x128x64, num_stages=2", kernels.gemm_bias_relu,
             [a[:128], b[:, :128], torch.empty(128, dtype=bf16), c[:128, :128]], dict(num_stages=2)),
            ("axpb_relu 1024x1024 fp32", kernels.axpb_relu, [x, x.clone()], {}),
            ("copy2d 1024x1024 bf16", kernels.copy2d, [x.bfloat16(), x.bfloat16()], {})]


def timed_by_kind(spent: dict):
    """Wrap passes' statement lowerings (passes._dispatch calls them by these names); returns the originals."""
    saved = {}
    for name, kind in [*KINDS.items(), ("lower_statements", "statements")]:
        inner = saved[name] = getattr(passes, name)

        def wrapper(*a, _inner=inner, _kind=kind, **k):
            if spent.get(("depth", _kind)):  # loops lower their bodies through lower_statements again
                return _inner(*a, **k)
            spent[("depth", _kind)] = 1
            t0 = time.process_time()
            try:
                return _inner(*a, **k)
            finally:
                spent[_kind] = spent.get(_kind, 0.0) + time.process_time() - t0
                spent[("depth", _kind)] = 0

        setattr(passes, name, wrapper)
    return saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--arch", action="append", help="default: gfx942 and gfx950")
    opts = ap.parse_args()
    spent: dict = {}
    saved = timed_by_kind(spent)
    try:
        for label, fn, args, constants in cases():
            for arch in opts.arch or ["gfx942", "gfx950"]:
                _, trace_args = fn._signature(args)
                kernel = trace(fn.fn, trace_args, fn._constants(dict(constants)), arch)
                runs: dict = {}
                try:
                    for _ in range(opts.repeat + 1):  # the first warms the process (plans, imports)
                        symcache.clear()
                        spent.clear()
                        compiler.lower(kernel, arch)
                        for kind in ("statements", *KINDS.values()):
                            runs.setdefault(kind, []).append(spent.get(kind, 0.0))
                except ResourceError:
                    print(f"{label}, {arch}: refused (registers)")
                    continue
                med = {kind: statistics.median(v[1:]) * 1e3 for kind, v in runs.items()}
                rest = med["statements"] - sum(med[k] for k in KINDS.values())
                print(f"{label}, {arch}: statements {med['statements']:.1f} ms: "
                      + ", ".join(f"{k} {med[k]:.1f}" for k in KINDS.values()) + f", rest {rest:.1f}")
    finally:
        for name, inner in saved.items():
            setattr(passes, name, inner)
    return 0


if __name__ == "__main__":
    sys.exit(main())
