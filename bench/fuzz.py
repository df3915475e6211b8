"""Seeded fuzz of elementwise and GEMM kernels against torch: shapes, strides, dtypes, tile configs, arches.

    PYTHONPATH=$PWD python bench/fuzz.py --cases 200 --seed 0      # prints cases run / wrong / refused / errors

Each case draws a kernel and its arguments from a seeded generator, runs it on the emulated device and
compares with torch. Outcomes:
  ok       matches torch within the output dtype's rounding, and nothing outside the output view changed;
  wrong    a silent wrong answer or a stray write: a bug (the case is printed with everything needed to reproduce it);
  refused  a clear tilegcn error (TilegcnError) for a configuration tilegcn does not support;
  error    any other exception escaping to the user: a bug.
tests/test_fuzz.py runs a reduced number of these cases in the test suite.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tilegcn  # noqa: E402
from tilegcn import language as T  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ARCHES = ("gfx942", "gfx950")
EW_TILES = [(16, 64, 64), (32, 32, 64), (64, 64, 128), (64, 128, 256), (128, 64, 256), (32, 128, 128)]
GEMM_TILES = [(64, 64, 32, 256), (64, 64, 64, 128), (128, 128, 32, 256), (32, 32, 32, 64), (128, 64, 64, 256),
              (64, 128, 32, 256)]
# Elementwise bodies: (name, tile-language function of (x, a), torch reference of (x, a)).
EW_OPS = [
    ("axpb_relu", lambda v, a: T.max(v * a + 1.0, 0.0), lambda x, a: torch.relu(x * a + 1.0)),
    ("clamp", lambda v, a: T.min(T.max(v, -a), a), lambda x, a: torch.clamp(x, -a, a)),
    ("abs_sub", lambda v, a: T.abs(v - a), lambda x, a: (x - a).abs()),
    ("exp2", lambda v, a: T.exp2(v * 0.5), lambda x, a: torch.exp2(x * 0.5)),
    ("scale", lambda v, a: v * a - v, lambda x, a: x * a - x),
]


@tilegcn.jit
def fuzz_elementwise(X, Y, a, *, op=None, block_M=64, block_N=64, threads=128):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(X[by * block_M, bx * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = op(x[i, j], a)
        T.copy(x, Y[by * block_M, bx * block_N])


@tilegcn.jit
def fuzz_gemm(A, B, C, *, block_M=64, block_N=64, block_K=32, threads=256, transpose_B=False):
    M, K = A.shape
    N = C.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_N, block_K) if transpose_B else (block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K)):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[bx * block_N, k * block_K] if transpose_B else B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=transpose_B)
        T.copy(acc, C[by * block_M, bx * block_N])


@dataclass
class Case:
    kind: str  # "elementwise" or "gemm"
    arch: str
    params: dict = field(default_factory=dict)

    def __str__(self):
        return f"{self.kind} {self.arch} " + " ".join(f"{k}={v}" for k, v in self.params.items())


def _view(gen: torch.Generator, rows: int, cols: int, dtype, layout: str) -> torch.Tensor:
    """A (rows, cols) tensor laid out as `layout`: contiguous, a view into wider rows (row stride > cols,
    data pointer possibly not 16-byte aligned), or a view with a padded row stride."""
    if layout == "contiguous":
        return torch.randn(rows, cols, generator=gen).to(dtype)
    extra = 8 if layout == "padded" else 3
    start = 0 if layout == "padded" else 1
    wide = torch.randn(rows, cols + extra, generator=gen).to(dtype)
    return wide[:, start:start + cols]


def _ulp_tolerance(dtype) -> tuple:
    """(rtol, atol): two units in the last place of the output dtype, plus fp32 rounding before the cast."""
    eps = torch.finfo(dtype).eps
    return 2 * eps, 2 * eps


def make_cases(seed: int, n: int) -> list:
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        arch = rng.choice(ARCHES)
        if i % 3 != 2:
            bm, bn, threads = rng.choice(EW_TILES)
            cases.append(Case("elementwise", arch, dict(
                M=rng.randint(1, 300), N=rng.randint(1, 300), x_dtype=rng.choice(list(DTYPES)),
                y_dtype=rng.choice(list(DTYPES)), x_layout=rng.choice(["contiguous", "contiguous", "offset", "padded"]),
                y_layout=rng.choice(["contiguous", "contiguous", "padded"]), op=rng.randrange(len(EW_OPS)),
                a=rng.choice([0.5, 1.5, -2.0, 3]), block_M=bm, block_N=bn, threads=threads, seed=rng.randrange(2**31))))
        else:
            bm, bn, bk, threads = rng.choice(GEMM_TILES)
            cases.append(Case("gemm", arch, dict(
                M=rng.randint(1, 160), N=rng.randint(1, 80) * 2 if rng.random() < 0.8 else rng.randint(1, 160), K=rng.choice([16, 32, 48, 64, 96, 130, rng.randint(2, 160) // 2 * 2]),
                in_dtype=rng.choice(["bfloat16", "float16"]), c_dtype=rng.choice(list(DTYPES)),
                transpose_B=rng.random() < 0.5, a_layout=rng.choice(["contiguous", "contiguous", "padded"]),
                block_M=bm, block_N=bn, block_K=bk, threads=threads, seed=rng.randrange(2**31))))
    return cases


def _run_elementwise(c: Case):
    p = c.params
    gen = torch.Generator().manual_seed(p["seed"])
    x = _view(gen, p["M"], p["N"], DTYPES[p["x_dtype"]], p["x_layout"])
    y = _view(gen, p["M"], p["N"], DTYPES[p["y_dtype"]], p["y_layout"])
    base_before = None if y._base is None else y._base.clone()
    _, op, ref = EW_OPS[p["op"]]
    fuzz_elementwise(x, y, p["a"], op=op, block_M=p["block_M"], block_N=p["block_N"], threads=p["threads"],
                     arch=c.arch)
    return y, ref(x.float(), float(p["a"])).to(y.dtype), base_before


def _run_gemm(c: Case):
    p = c.params
    gen = torch.Generator().manual_seed(p["seed"])
    dt = DTYPES[p["in_dtype"]]
    a = _view(gen, p["M"], p["K"], dt, p["a_layout"])
    b = _view(gen, p["N"], p["K"], dt, "contiguous") if p["transpose_B"] else _view(gen, p["K"], p["N"], dt,
                                                                                       "contiguous")
    c_out = torch.empty(p["M"], p["N"], dtype=DTYPES[p["c_dtype"]])
    fuzz_gemm(a, b, c_out, block_M=p["block_M"], block_N=p["block_N"], block_K=p["block_K"], threads=p["threads"],
              transpose_B=p["transpose_B"], arch=c.arch)
    return c_out, (a.float() @ (b.float().T if p["transpose_B"] else b.float())).to(c_out.dtype), None


def _stray_writes(view: torch.Tensor, base_before: torch.Tensor) -> int:
    """Elements of the tensor `view` was cut from, outside the view, that the kernel changed."""
    base = view._base
    outside = torch.ones(base.shape, dtype=torch.bool)
    outside.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(False)
    return int((base[outside] != base_before[outside]).sum())


def run_case(c: Case) -> tuple:
    """(outcome, detail): outcome is "ok", "wrong", "refused" or "error"."""
    run = _run_elementwise if c.kind == "elementwise" else _run_gemm
    try:
        got, want, base_before = run(c)
    except tilegcn.TilegcnError as e:
        return "refused", f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a raw exception escaping is a finding
        return "error", f"{type(e).__name__}: {e}"
    stray = 0 if base_before is None else _stray_writes(got, base_before)
    if stray:
        return "wrong", f"{stray} elements outside the output view were written"
    rtol, atol = _ulp_tolerance(got.dtype)
    if c.kind == "gemm":  # fp32 accumulation in another order than torch's
        atol = max(atol, 1e-5 * c.params["K"] ** 0.5)
        rtol = max(rtol, 2 ** -12 if got.dtype == torch.float32 else rtol)
    if torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol, equal_nan=True):
        return "ok", ""
    diff = (got.float() - want.float()).abs()
    where = tuple(int(i) for i in (diff == diff.max()).nonzero()[0])
    return "wrong", f"max |diff| {diff.max().item():.3g} at {where}: got {got[where].item()}, want {want[where].item()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show-refused", action="store_true", help="print every refusal's message")
    args = ap.parse_args(argv)
    counts = {"ok": 0, "wrong": 0, "refused": 0, "error": 0}
    t0 = time.perf_counter()
    for c in make_cases(args.seed, args.cases):
        outcome, detail = run_case(c)
        counts[outcome] += 1
        if outcome in ("wrong", "error") or (outcome == "refused" and args.show_refused):
            print(f"{outcome.upper()}: {c}\n    {detail}", flush=True)
    elapsed = time.perf_counter() - t0
    print(f"seed {args.seed}: cases run {args.cases}, ok {counts['ok']}, wrong {counts['wrong']}, "
          f"refused {counts['refused']} (clear tilegcn errors), errors {counts['error']} (raw exceptions); "
          f"{elapsed:.0f} s")
    return 1 if counts["wrong"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
