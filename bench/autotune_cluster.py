"""A 64-config GEMM sweep on 1 vs 2 (or --workers ...) local Dask workers: wall time side by side.

    python bench/autotune_cluster.py                       # 2048^3 bf16, ranked for MI355X by the timing model
    python bench/autotune_cluster.py --size 1024 --workers 1 2 4

Each run starts a `distributed.LocalCluster` of N single-threaded worker processes, each with its own empty
cache dir (as other hosts would have), and tunes the same 64 configs from an empty cache in this process: the
workers compile and rank every config (the timing model's estimate), this process imports the entries and
checks the winner. "sweep" is the wall time of `tuned.tune(...)`; the cluster's start and the workers' first
imports are timed apart ("start"), since a standing cluster pays them once. Needs `pip install distributed`.
The caches are temporary folders: the user's cache is never touched.
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "gemm"))
from autotune import gemm, gemm_flops  # noqa: E402  the tutorial's GEMM

import tilegcn  # noqa: E402

SPACE = tilegcn.Space(block_M=[128, 256], block_N=[128, 256], block_K=[32, 64], threads=[256, 512],
                      num_stages=[1, 2], panel=[1, 8])  # 64 configs


def _warm(client):
    """The workers' first imports (the compile pipeline, the emulator), outside the timed sweep."""
    def imports():
        import tilegcn.passes  # noqa: F401
        import tilegcn.runtime.emulator  # noqa: F401

    client.run(imports)


def sweep_on(n_workers: int, size: int, device: str) -> dict:
    import distributed

    scratch = Path(tempfile.mkdtemp(prefix="tilegcn-bench-cluster-"))
    os.environ["TILEGCN_CACHE_DIR"] = str(scratch / "here")  # this process's cache: empty for every run
    t0 = time.perf_counter()
    with distributed.LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=":0", env={"TILEGCN_CACHE_DIR": str(scratch / "workers")}) as c, \
            distributed.Client(c, set_as_default=False) as client:
        _warm(client)
        start = time.perf_counter() - t0
        tuned = tilegcn.Autotuner(tilegcn.jit(gemm.fn), SPACE, key=["M", "N", "K"], device=device, flops=gemm_flops,
                                  cluster=client, verify=False, progress=False, verbose=False)
        torch.manual_seed(0)
        a, b = (torch.randn(size, size, dtype=torch.bfloat16) for _ in range(2))
        c_ = torch.empty(size, size, dtype=torch.bfloat16)
        t1 = time.perf_counter()
        best = tuned.tune(a, b, c_)
        sweep = time.perf_counter() - t1
    report = tuned.report
    statuses = [r.status for r in report.rows]
    return {"workers": n_workers, "start": start, "sweep": sweep, "phases": report.phases, "best": best,
            "ranked": sum(s in ("ok", "best") for s in statuses), "skipped": statuses.count("skipped"),
            "failed": statuses.count("failed"), "here": tuned.fn.cache_stats.compiles,
            "note": report.notes[-1]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=2048, help="M = N = K of the bf16 GEMM (default 2048)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Dask worker counts to compare")
    p.add_argument("--device", default="MI355X", help="the timing model's target: MI300X or MI355X")
    args = p.parse_args()
    print(f"64-config sweep of a {args.size}^3 bf16 GEMM, ranked for {args.device} by the timing model; "
          f"{os.cpu_count()} CPUs here")
    runs = [sweep_on(n, args.size, args.device) for n in args.workers]
    base = runs[0]["sweep"]
    print(f"\n{'workers':>7}  {'start s':>7}  {'sweep s':>7}  {'speed-up':>8}  {'check':>5}  {'compile+rank':>12}  "
          f"{'verify':>6}  ranked/skipped/failed  compiled here  winner")
    for r in runs:
        ph = r["phases"]
        print(f"{r['workers']:>7}  {r['start']:>7.1f}  {r['sweep']:>7.1f}  {base / r['sweep']:>7.2f}x  "
              f"{ph.get('check', 0):>5.1f}  {ph.get('compile', 0) + ph.get('rank', 0):>12.1f}  "
              f"{ph.get('verify', 0):>6.1f}  {r['ranked']:>6}/{r['skipped']}/{r['failed']:<13}  {r['here']:>13}  "
              f"{' '.join(f'{k}={v}' for k, v in r['best'].items())}")
    winners = {str(r["best"]) for r in runs}
    print(f"\nsame winner on every run: {len(winners) == 1}")
    for r in runs:
        print(f"[{r['workers']} worker(s)] {r['note']}")


if __name__ == "__main__":
    main()
