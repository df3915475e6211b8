"""Compile time, cache-hit time and warm-call overhead of @tilegcn.jit kernels (medians over --repeat runs).

    python bench/compile_time.py [--repeat 9] [--arch gfx950] [--strict]

Per kernel and arch:
  cold compile   fn.compile(...) against an empty cache dir, in a warm process (imports done, LLVM found,
                 compiler sources hashed, but the lowering's SymPy memos emptied: what a first compile of
                 the kernel in a process costs), broken down into trace / key (IR text + hash) / lower /
                 assemble / cache (lock + publish)
  cache hit      a new process (`python -c`) compiling against the populated cache: the compile call's
                 in-process time, the import time, and the whole process's wall time
  warm call      host-side overhead of a warm `fn(*args)` before the device launch: the call is made once for
                 real, then the prepared launchers' modules are swapped for a module whose launch() does
                 nothing (JITFunction.launchers(), a hook off the hot path) and calls are timed in a loop
Targets: cold <= 50 ms, warm overhead <= 5 us.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import torch  # noqa: E402

import tilegcn  # noqa: E402
from tilegcn.amdgcn import symcache  # noqa: E402

COLD_TARGET_S = 0.050
WARM_TARGET_S = 5e-6
PARTS = ("statements", "schedule", "allocate", "waits", "hazards", "render")  # of the lowering, disjoint


# One row per benchmarked kernel: (label, "module:attribute" of the JITFunction, argument builder as source text
# (the cache-hit child process evaluates it too), constants, arguments for the warm-call measurement or None:
# one real launch on the device precedes it, so one tile keeps the emulator quick; the overhead does not depend
# on the shape).
# Add GEMM variants here (e.g. other tiles through the constants: {"block_M": 128, ...}).
_GEMM_ARGS = ("[torch.randn(256, 512, dtype=torch.bfloat16), torch.randn(512, 256, dtype=torch.bfloat16),"
              " torch.empty(256, 256, dtype=torch.bfloat16)]")
CASES = [
    ("axpb_relu 1024x1024 fp32", "kernels:axpb_relu",
     "[torch.randn(1024, 1024), torch.empty(1024, 1024)]", {}, "[torch.randn(256, 128), torch.empty(256, 128)]"),
    ("copy2d 1024x1024 bf16", "kernels:copy2d",
     "[torch.randn(1024, 1024).bfloat16(), torch.empty(1024, 1024, dtype=torch.bfloat16)]", {}, None),
    # the GEMM tile of issue 7 on a problem with a K loop (8 steps of block_K = 64): with K = 64 there is one step,
    # and at num_stages >= 2 no steady loop at all (n < S: prologue and drain only)
    ("gemm 256x256x64 tile, 256x256x512, 512 threads", "examples.gemm.gemm:gemm", _GEMM_ARGS, {}, None),
    # 256 threads: on gfx942 the 8-wave kernel's stage in VGPRs does not fit two waves per SIMD (a ResourceError)
    ("gemm 256x256x64 tile, 256x256x512, num_stages=2, 256 threads", "examples.gemm.gemm:gemm", _GEMM_ARGS,
     {"num_stages": 2, "threads": 256}, None),
    ("gemm 256x256x64 tile, 256x256x512, num_stages=2, 512 threads", "examples.gemm.gemm:gemm", _GEMM_ARGS,
     {"num_stages": 2}, None),
]


def load(target: str):
    module, attr = target.split(":")
    __import__(module)
    return getattr(sys.modules[module], attr)


def median_ms(xs) -> str:
    return f"{statistics.median(xs) * 1e3:8.2f} ms"


def cold(fn, args, constants, arch, repeat):
    """Medians of fn.compile() against a fresh cache dir each time; returns (total list, parts dict, cache dir)."""
    totals, parts = [], {}
    last_dir = None
    for i in range(repeat):
        if last_dir:
            shutil.rmtree(os.path.dirname(last_dir), ignore_errors=True)
        last_dir = os.path.join(tempfile.mkdtemp(prefix="tilegcn-bench-"), "cache")
        os.environ["TILEGCN_CACHE_DIR"] = last_dir
        f = tilegcn.jit(fn.fn)
        symcache.clear()  # no SymPy result memoised by an earlier compile of this kernel
        t0 = time.perf_counter()
        k = f.compile(*args, arch=arch, **constants)
        totals.append(time.perf_counter() - t0)
        assert f.cache_stats.compiles == 1, f.cache_stats
        for name, value in k.timings.items():
            parts.setdefault(name, []).append(value)
    return totals, parts, last_dir


CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path[:0] = {paths!r}
import torch, tilegcn
t1 = time.perf_counter()
module, attr = {target!r}.split(":")
__import__(module)
fn = getattr(sys.modules[module], attr)
args = {args}
t2 = time.perf_counter()
k = fn.compile(*args, arch={arch!r}, **{constants!r})
t3 = time.perf_counter()
print(json.dumps({{"import": t1 - t0, "compile": t3 - t2, "compiles": fn.cache_stats.compiles,
                  "disk_hits": fn.cache_stats.disk_hits}}))
"""


def cache_hit(target, args_src, constants, arch, cache_dir, repeat):
    """(compile call, import, process wall) seconds of children that hit the cache, and the number that did not.

    One unmeasured child runs first (the OS file cache; and should tilegcn's sources have changed since this
    process hashed them, it publishes the entry the children's key names). Children that still compile
    (sources edited during the run) are left out of the figures and counted.
    """
    code = CHILD.format(paths=[str(REPO), str(REPO / "tests")], target=target, args=args_src, arch=arch,
                        constants=constants)
    env = {**os.environ, "TILEGCN_CACHE_DIR": cache_dir}
    walls, imports, compiles, missed = [], [], [], 0
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"child failed:\n{proc.stderr}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if i == 0:
            continue
        if out["compiles"] != 0 or out["disk_hits"] != 1:
            missed += 1
            continue
        walls.append(wall)
        imports.append(out["import"])
        compiles.append(out["compile"])
    return compiles, imports, walls, missed


def lowering_breakdown(fn, args, constants, arch, repeat) -> dict:
    """Median CPU seconds (process time: steadier than wall time on a shared machine) of the parts of
    `tilegcn.compiler.lower` for one kernel (SymPy memos emptied each run):
    statement lowering (of which address arithmetic: the outermost ExprLowering.vgpr/vgpr_plus/sgpr/sgpr64 calls),
    instruction scheduling (of which the dependency graph, its register unit keys, and the list scheduling),
    register allocation (of which liveness, the linear scan and the operand rewrite, of which the physical
    operands), wait counts (of which the instructions' effects), hazard nops (of which finding the instructions a
    rule can use), rendering, and of the rest (other) the text of the pipelined tile IR (Lowered's `ir`). The parts
    are timed by wrapping those functions for the measurement."""
    from tilegcn import compiler
    from tilegcn.amdgcn import hazards, isa, regalloc, waitcnt
    from tilegcn.amdgcn import schedule as scheduler
    from tilegcn.amdgcn.addr import ExprLowering
    from tilegcn.language import trace

    SUBPARTS = [(scheduler, "_dependencies", "schedule: dependencies"),
                (isa, "program_unit_keys", "schedule: dependencies: unit keys"),
                (scheduler, "_list_schedule", "schedule: list"),
                (regalloc, "live_ranges", "allocate: liveness"), (regalloc, "_scan", "allocate: linear scan"),
                (regalloc, "_rewrite", "allocate: rewrite"),
                (regalloc, "_physical_operands", "allocate: rewrite: physical operands"),
                (waitcnt, "_block_effects", "waits: effects"), (hazards, "_events", "hazards: events"),
                (compiler, "print_kernel", "other: IR text")]
    signature, trace_args = fn._signature(args)
    kernel = trace(fn.fn, trace_args, fn._constants(dict(constants)), arch)
    spent: dict = {}
    depth: dict = {}  # part -> calls of it in progress: only the outermost one is timed (they recurse)

    def timed(owner, name, part):
        inner = getattr(owner, name)

        def wrapper(*a, **k):
            if depth.get(part):
                return inner(*a, **k)
            depth[part] = 1
            t0 = time.process_time()
            try:
                return inner(*a, **k)
            finally:
                spent[part] = spent.get(part, 0.0) + time.process_time() - t0
                depth[part] = 0

        setattr(owner, name, wrapper)
        return owner, name, inner

    saved = [timed(compiler, "lower_statements", "statements"), timed(compiler, "schedule", "schedule"),
             timed(compiler, "allocate", "allocate"), timed(compiler, "insert_waits", "waits"),
             timed(compiler, "insert_hazard_nops", "hazards"), timed(compiler, "render", "render")]
    saved += [timed(ExprLowering, m, "address arithmetic") for m in ("vgpr", "vgpr_plus", "sgpr", "sgpr64")
              if hasattr(ExprLowering, m)]
    # (a function an older checkout lacks is left out: the script also times the code before a change)
    saved += [timed(owner, name, part) for owner, name, part in SUBPARTS if hasattr(owner, name)]
    runs: dict = {}
    try:
        for _ in range(repeat):
            symcache.clear()
            spent.clear()
            t0 = time.process_time()
            compiler.lower(kernel, arch)
            spent["total"] = time.process_time() - t0
            for part, value in spent.items():
                runs.setdefault(part, []).append(value)
    finally:
        for owner, name, inner in saved:
            setattr(owner, name, inner)
    return {part: statistics.median(values) for part, values in runs.items()}


def print_cache_hit(target, args_src, constants, arch, cache_dir, repeat):
    compiles, imports, walls, not_hit = cache_hit(target, args_src, constants, arch, cache_dir, repeat)
    if compiles:
        print(f"  cache hit, new process: compile call {median_ms(compiles)}, "
              f"import torch+tilegcn {median_ms(imports)}, process wall {median_ms(walls)}"
              + (f" ({not_hit} runs left out: tilegcn's sources changed meanwhile)" if not_hit else ""))
    else:
        print("  cache hit, new process: not measured (tilegcn's sources changed during every run)")


class NullModule:
    """A device module whose launch does nothing: what is left of a call is the host-side overhead."""

    def launch(self, name, grid, block, args):
        return None


def warm_overhead(fn, args, kwargs, repeat, number=20000):
    """Per-call seconds of a warm `f(*args, **kwargs)` minus the device launch (see the module docstring)."""
    f = tilegcn.jit(fn.fn)  # its own memo and counters
    f(*args, **kwargs)  # compile (or hit the cache) and one real launch on the selected device
    for launcher in f.launchers():
        launcher.module = NullModule()
    per_call = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            f(*args, **kwargs)
        per_call.append((time.perf_counter() - t0) / number)
    assert f.cache_stats.traces == 1 and f.cache_stats.memo_misses == 1, f.cache_stats
    return per_call


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=9, help="runs per measurement (median reported)")
    ap.add_argument("--arch", action="append", help="target arch (repeatable); default: gfx942 and gfx950")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm-call measurement (needs a device)")
    ap.add_argument("--no-cache-hit", action="store_true", help="skip the cache-hit measurement (new processes)")
    ap.add_argument("--breakdown", action="store_true", help="also split the lowering into its parts")
    opts = ap.parse_args()
    arches = opts.arch or ["gfx942", "gfx950"]
    saved_env = {k: os.environ.get(k) for k in ("TILEGCN_CACHE_DIR", "TILEGCN_ARCH")}
    warmup_dir = tempfile.mkdtemp(prefix="tilegcn-bench-warmup-")  # never the user's cache
    missed = []
    llvm = tilegcn.toolchain.find_llvm(arches[0])
    print(f"tilegcn {tilegcn.__version__}, LLVM {llvm.version}, python {sys.version.split()[0]}, "
          f"torch {torch.__version__}, medians of {opts.repeat} runs")
    for label, target, args_src, constants, warm_args_src in CASES:
        fn = load(target)
        args = eval(args_src, {"torch": torch})
        for arch in arches:
            print(f"\n{label} [{arch}]")
            os.environ["TILEGCN_CACHE_DIR"] = warmup_dir
            try:
                fn.compile(*args, arch=arch, **constants)  # warm the process: imports, LLVM probe, source hash
            except tilegcn.ResourceError as err:  # a config this arch cannot run (e.g. its registers)
                print(f"  refused: {str(err).split(': ', 1)[-1][:150]}")
                continue
            totals, parts, cache_dir = cold(fn, args, constants, arch, opts.repeat)
            ok = statistics.median(totals) <= COLD_TARGET_S
            missed += [] if ok else [f"cold compile {label} {arch}"]
            print(f"  cold compile      {median_ms(totals)}   (target <= {COLD_TARGET_S * 1e3:.0f} ms"
                  f"{'' if ok else ', MISSED'})")
            for name in ("trace", "key", "lower", "assemble", "cache"):
                if name in parts:
                    print(f"    {name:15} {median_ms(parts[name])}")
            if opts.breakdown:
                parts = lowering_breakdown(fn, args, constants, arch, opts.repeat)
                total = parts.pop("total")
                other = total - sum(parts.get(k, 0.0) for k in PARTS)
                print(f"    lowering alone, CPU time {median_ms([total])}: "
                      + ", ".join(f"{name} {value * 1e3:.1f} ms" for name, value in parts.items())
                      + f", other {other * 1e3:.1f} ms (address arithmetic is part of statements, "
                      "'schedule: ...' of schedule, 'allocate: ...' of allocate, 'waits: ...' of waits, "
                      "'hazards: ...' of hazards, 'other: ...' of other)")
            if not opts.no_cache_hit:
                print_cache_hit(target, args_src, constants, arch, cache_dir, opts.repeat)
            if warm_args_src and not opts.no_warm:
                warm_args = eval(warm_args_src, {"torch": torch})
                os.environ["TILEGCN_ARCH"] = arch  # so that the plain call form targets this arch
                for form, kwargs in (("fn(*args)", {}), ("fn(*args, arch=...)", {"arch": arch})):
                    try:
                        per_call = warm_overhead(fn, warm_args, {**constants, **kwargs}, opts.repeat)
                    except Exception as e:  # no device able to run it: report, keep the other figures
                        print(f"  warm call overhead: not measured ({type(e).__name__}: {e})")
                        break
                    us = statistics.median(per_call) * 1e6
                    ok = us <= WARM_TARGET_S * 1e6
                    missed += [] if ok else [f"warm overhead {label} {arch} {form}"]
                    print(f"  warm call overhead before launch, {form:20} {us:6.2f} us "
                          f"(target <= {WARM_TARGET_S * 1e6:.0f} us{'' if ok else ', MISSED'})")
            shutil.rmtree(os.path.dirname(cache_dir), ignore_errors=True)
    shutil.rmtree(warmup_dir, ignore_errors=True)
    for k, v in saved_env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if missed:
        print("\nmissed targets: " + ", ".join(missed))
    return 1 if (missed and opts.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
