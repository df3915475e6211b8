"""Wall time of an autotuning sweep's compile phase: the GEMM space of examples/gemm/autotune.py (512^3 bf16; 40
configs, 32 before its ping_pong axis), with 1 compile worker (in this process) vs 2 (spawned processes sharing the
disk cache).

    python bench/autotune_compile.py [--repeats 2] [--arch gfx950]

Each measurement runs in a fresh process with an empty cache dir, alternating 1 and 2 workers, so neither
profits from the other's warm caches; medians are printed. The ranking is a constant stand-in (this measures
compiling only) and the winner check is off.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def once(workers: int, arch: str) -> dict:
    sys.path.insert(0, str(ROOT / "examples" / "gemm"))
    import torch

    import tilegcn
    from tilegcn.autotune import Score
    from autotune import SPACE, gemm  # examples/gemm/autotune.py

    tuned = tilegcn.autotune(configs=SPACE, ranker=lambda kernel, args: Score(1.0), workers=workers,
                             verify=False, progress=False, verbose=False)(gemm)
    a = torch.randn(512, 512, dtype=torch.bfloat16)
    tuned.tune(a, a.clone(), torch.empty_like(a), arch=arch)
    rows = tuned.report.rows
    return {"compile_s": tuned.report.phases["compile"], "check_s": tuned.report.phases["check"],
            "compiled": sum(r.status != "skipped" for r in rows), "configs": len(rows)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--arch", default="gfx950")
    p.add_argument("--once", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.once:
        print(json.dumps(once(args.once, args.arch)))
        return
    results = {1: [], 2: []}
    for _ in range(args.repeats):
        for workers in (1, 2):
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TILEGCN_CACHE_DIR": cache,
                       "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
                out = subprocess.run([sys.executable, __file__, "--once", str(workers), "--arch", args.arch],
                                     env=env, capture_output=True, text=True, check=True).stdout
                results[workers].append(json.loads(out.splitlines()[-1]))
    r = results[1][0]
    print(f"GEMM sweep, 512^3 bf16 on {args.arch}: {r['configs']} configs, {r['compiled']} compiled "
          f"(the rest skipped by the resource checks); {os.cpu_count()} CPUs")
    for workers, runs in results.items():
        times = [x["compile_s"] for x in runs]
        print(f"  compile phase, {workers} worker(s): median {statistics.median(times):.1f} s "
              f"({', '.join(f'{t:.1f}' for t in times)})")
    ratio = statistics.median(x["compile_s"] for x in results[1]) / statistics.median(
        x["compile_s"] for x in results[2])
    print(f"  speed-up with 2 workers: {ratio:.2f}x")


if __name__ == "__main__":
    main()
