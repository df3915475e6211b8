"""A fleet's shared cache: host 1 tunes a small sweep against a Redis remote cache ($TILEGCN_REMOTE_CACHE);
host 2, a fresh process with an empty local cache, then gets every tuning record and every kernel of that
sweep from Redis with 0 compiles and 0 sweeps.

    python bench/remote_cache.py [--arch gfx950]

Starts its own redis-server (Debian's package: apt-get install redis-server) on a free loopback port with
no persistence, and stops it at the end. Each host is a separate process with its own empty cache dir.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(256, 512), (1024, 1024), (64, 2048)]  # one tuning record each


def sweep():
    import tilegcn
    from tilegcn import language as T

    @tilegcn.autotune(configs=tilegcn.Space(block_M=[16, 32, 64], block_N=[64, 128], threads=[64, 256]),
                      workers=1, progress=False, verbose=False)
    @tilegcn.jit
    def scale(X: T.Tensor(("M", "N")), Y: T.Tensor(("M", "N")), *, a=2.0, block_M=16, block_N=64, threads=64):
        M, N = X.shape
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            x = T.alloc_fragment((block_M, block_N), "float32")
            T.copy(X[by * block_M, bx * block_N], x)
            for i, j in T.Parallel(block_M, block_N):
                x[i, j] = x[i, j] * a
            T.copy(x, Y[by * block_M, bx * block_N])

    return scale


def host(arch: str) -> dict:
    """One host: tune every shape (a sweep, or the record from Redis), run the winner and check it against
    torch, then compile every config of the sweep (as a sweep would) and count what was compiled here."""
    import torch

    tuned = sweep()
    start = time.perf_counter()
    winners, correct = [], True
    for rows, cols in SHAPES:
        x = torch.randn(rows, cols)
        y = torch.empty_like(x)
        winners.append(tuned.tune(x, y, arch=arch))
        tuned.fn(x, y, arch=arch, **winners[-1])
        correct &= bool(torch.equal(y, x * 2))
        for config in tuned.configs:
            tuned.fn.compile(x, y, arch=arch, **config)
    stats = tuned.fn.cache_stats
    return {"wall_s": time.perf_counter() - start, "sweeps": tuned.stats["sweeps"],
            "records_from_redis": tuned.stats["remote_hits"], "kernels": stats.traces,
            "compiles": stats.compiles, "kernels_from_redis": stats.remote_hits,
            "local_disk_hits": stats.disk_hits, "winners": [str(w) for w in winners], "correct": correct}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir: str) -> tuple:
    if shutil.which("redis-server") is None:
        sys.exit("error: redis-server is not installed (Debian: apt-get install redis-server; `make install` does)")
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                             "--appendonly", "no", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(500):
        try:
            client.ping()
            return proc, client, f"redis://127.0.0.1:{port}/0"
        except redis.ConnectionError:
            time.sleep(0.02)
    proc.kill()
    sys.exit(f"error: redis-server did not start on 127.0.0.1:{port}")


def run_host(name: str, url: str, cache: str, arch: str) -> dict:
    env = {**os.environ, "TILEGCN_REMOTE_CACHE": url, "TILEGCN_CACHE_DIR": cache,
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--host", "--arch", arch], env=env, capture_output=True,
                         text=True)
    if out.returncode:
        sys.exit(f"error: {name} failed:\n{out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="gfx950")
    p.add_argument("--host", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.host:
        print(json.dumps(host(args.arch)))
        return 0
    with tempfile.TemporaryDirectory(prefix="tilegcn-remote-bench-") as tmp:
        proc, client, url = start_redis(tmp)
        try:
            first = run_host("host 1", url, os.path.join(tmp, "host1-cache"), args.arch)
            keys = {kind: len(client.keys(f"tilegcn:v1:{kind}:*")) for kind in ("kernel", "tune")}
            second = run_host("host 2", url, os.path.join(tmp, "host2-cache"), args.arch)
        finally:
            proc.kill()
            proc.wait()
    configs = len(sweep().configs)
    print(f"sweep: {configs} configs x {len(SHAPES)} shapes ({', '.join(f'{m}x{n}' for m, n in SHAPES)}), "
          f"arch {args.arch}; Redis at {url} holds {keys['kernel']} kernels and {keys['tune']} tuning records "
          "after host 1")
    print(f"{'host':8} {'local cache':12} {'sweeps':>6} {'records from Redis':>18} {'kernels':>7} {'compiles':>8} "
          f"{'kernels from Redis':>18} {'tilegcn s':>9} {'process s':>9}  correct")
    for name, r in (("host 1", first), ("host 2", second)):
        print(f"{name:8} {'empty':12} {r['sweeps']:>6} {r['records_from_redis']:>18} {r['kernels']:>7} "
              f"{r['compiles']:>8} {r['kernels_from_redis']:>18} {r['wall_s']:>9.2f} {r['process_s']:>9.2f}  "
              f"{r['correct']}")
    ok = (second["compiles"] == 0 and second["sweeps"] == 0 and second["records_from_redis"] == len(SHAPES)
          and second["kernels_from_redis"] == second["kernels"] and second["winners"] == first["winners"]
          and first["correct"] and second["correct"])
    print(("PASS" if ok else "FAIL") + ": host 2 got every tuning record and kernel from Redis with "
          f"{second['compiles']} compiles and {second['sweeps']} sweeps, and picked the same winners")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
