"""The fleet's shared cache on Redis ($TILEGCN_REMOTE_CACHE): a second host with an empty local cache gets
kernels and tuning records with 0 compiles; a remote entry is verified before use; a Redis that is down,
slow or killed mid-write costs one warning and never a half entry. Each test starts a real `redis-server`
(Debian's package, installed by `make install`) on a free loopback port."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

import tilegcn
from tilegcn import remote_cache
from tilegcn.__main__ import main as cli
from tilegcn.cache import Cache, CacheWarning
from tilegcn.errors import CacheError
from tilegcn.remote_cache import RemoteCacheWarning

import autotune_kernels as K
from kernels import axpb_relu, copy2d, fma_f32

redis = pytest.importorskip("redis") if os.environ.get("CI") != "true" else __import__("redis")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server on 127.0.0.1 (never another interface); `kill` / `start` for the crash tests."""

    def __init__(self, workdir: Path, persist: bool = False):
        self.port, self.workdir, self.persist, self.proc = _free_port(), workdir, persist, None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", *persistence,
             "--dir", str(self.workdir), "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start")
                time.sleep(0.02)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped server would not die of SIGKILL before it runs
            self.proc.kill()
        if self.proc:
            self.proc.wait()
        self.client.close()


def _make_server(tmp_path, persist=False):
    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed: `make install` installs Debian's redis-server package")
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server; `make install` does)")
    workdir = tmp_path / "redis"
    workdir.mkdir()
    return RedisServer(workdir, persist)


@pytest.fixture
def fresh_remote(monkeypatch):
    """Forget this process's remote stores (their backoff and warning), before and after the test."""
    os.environ.pop(remote_cache.ENV_DOWN, None)  # the backoff a failing store hands to child processes
    remote_cache._stores.clear()
    yield
    os.environ.pop(remote_cache.ENV_DOWN, None)
    remote_cache._stores.clear()


@pytest.fixture
def redis_server(tmp_path, monkeypatch, fresh_remote):
    server = _make_server(tmp_path).start()
    monkeypatch.setenv("TILEGCN_REMOTE_CACHE", server.url)
    yield server
    server.kill()


def _run_copy2d(rows=64):
    x = torch.randn(rows, 128)
    y = torch.empty_like(x)
    copy2d(x, y)
    assert torch.equal(y, x)


def _kernel_keys(server) -> list:
    return sorted(k.decode() for k in server.client.keys("tilegcn:v1:kernel:*"))


def test_a_second_host_gets_the_kernel_from_redis_with_no_compile(redis_server, run_python, tmp_path, capsys):
    copy2d.cache_clear()
    _run_copy2d()
    assert copy2d.cache_stats.compiles == 1
    [redis_key] = _kernel_keys(redis_server)  # published by the build
    key = redis_key.rsplit(":", 1)[1]

    host2 = tmp_path / "host2-cache"  # a second host: an empty local cache, the same Redis
    out = run_python("""
import torch
from kernels import copy2d
x = torch.randn(64, 128); y = torch.empty_like(x)
copy2d(x, y)
s = copy2d.cache_stats
print(torch.equal(x, y), s.compiles, s.remote_hits, s.disk_hits)
""", env={"TILEGCN_CACHE_DIR": str(host2)}).stdout.split()
    assert out == ["True", "0", "1", "0"]

    entry = Cache(host2).load(key)  # written through: verified under host 2's own key like any local entry
    assert entry is not None and entry.meta["origin"] == "remote"
    assert entry.meta["remote"]["url"] == redis_server.url
    os.environ["TILEGCN_CACHE_DIR"] = str(host2)  # restored by the cache_dir fixture's monkeypatch
    capsys.readouterr()
    assert cli(["cache", "show", key[:12]]) == 0
    shown = capsys.readouterr().out
    assert f"origin:    remote (fetched from {redis_server.url} at " in shown
    assert '"origin": "remote"' in shown
    assert cli(["cache", "list"]) == 0
    assert "(from the remote cache)" in capsys.readouterr().out


def _tamper_hsaco(fields):
    hsaco = bytearray(fields[b"kernel.hsaco"])
    hsaco[-1] ^= 1
    return {"kernel.hsaco": bytes(hsaco)}, "kernel.hsaco does not match the sha256"


def _tamper_ir_with_new_digests(fields):
    """An attacker with write access to Redis swaps kernel.ir and recomputes every digest: the jit's own
    check (kernel.ir must be the IR this key was made from) still refuses it."""
    from tilegcn.cache import meta_digest
    import hashlib

    ir = fields[b"kernel.ir"].replace(b"copy2d", b"copy2e", 1)
    meta = json.loads(fields[b"meta.json"])
    meta["ir_sha256"] = hashlib.sha256(ir).hexdigest()
    meta["meta_sha256"] = meta_digest(meta)
    return {"kernel.ir": ir, "meta.json": json.dumps(meta).encode()}, "kernel.ir is not the IR this key was made"


@pytest.mark.parametrize("tamper", [_tamper_hsaco, _tamper_ir_with_new_digests])
def test_a_tampered_remote_entry_is_rebuilt_and_replaced(redis_server, monkeypatch, tmp_path, tamper):
    copy2d.cache_clear()
    _run_copy2d()
    [redis_key] = _kernel_keys(redis_server)
    good = redis_server.client.hgetall(redis_key)
    changed, problem = tamper(good)
    redis_server.client.hset(redis_key, mapping=changed)

    monkeypatch.setenv("TILEGCN_CACHE_DIR", str(tmp_path / "host2-cache"))
    copy2d.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_copy2d()
    bad = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(bad) == 1 and "holds a bad entry" in bad[0] and problem in bad[0], bad
    assert (copy2d.cache_stats.compiles, copy2d.cache_stats.remote_hits) == (1, 0)
    replaced = redis_server.client.hgetall(redis_key)  # the local build replaced the bad entry
    for name in (b"kernel.ir", b"kernel.s", b"kernel.hsaco"):
        assert replaced[name] == good[name], name


def test_a_redis_that_is_down_costs_one_warning_and_a_local_hit_never_asks(monkeypatch, fresh_remote):
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    copy2d.cache_clear()
    _run_copy2d()  # built with no remote: a local entry
    monkeypatch.setenv("TILEGCN_REMOTE_CACHE", url)
    copy2d.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_copy2d()  # a local disk hit: Redis is not asked
        assert not caught and copy2d.cache_stats.disk_hits == 1
        start = time.monotonic()
        _run_copy2d(rows=32)  # two local misses: one failed connection, then the backoff
        x = torch.randn(16, 256)
        y = torch.empty_like(x)
        axpb_relu(x, y, a=3.0)
        elapsed = time.monotonic() - start
    assert torch.equal(y, torch.relu(fma_f32(x, 3.0, 1.0)))  # (x * a + b contracts to one FMA, as in HIP)
    down = [str(w.message) for w in caught if issubclass(w.category, RemoteCacheWarning)]
    assert len(down) == 1 and url in down[0] and "using the local cache only" in down[0], down
    assert remote_cache.store().failures == 1  # the second miss did not try again
    assert elapsed < 30  # a refused connection fails fast (the compiles themselves take a few seconds)


def test_a_stalled_redis_times_out_once_then_is_skipped(redis_server):
    redis_server.proc.send_signal(signal.SIGSTOP)  # accepts connections (the kernel does) but never answers
    try:
        copy2d.cache_clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.monotonic()
            _run_copy2d()
            first = time.monotonic() - start
            _run_copy2d(rows=32)  # another kernel: the remote is skipped, no second timeout
        down = [str(w.message) for w in caught if issubclass(w.category, RemoteCacheWarning)]
        assert len(down) == 1 and "Timeout" in down[0], down
        assert remote_cache.store().failures == 1 and copy2d.cache_stats.compiles == 2
        assert first >= remote_cache.OP_TIMEOUT_S * 0.9  # it did wait for the stalled server, once
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)


def test_a_sweep_with_compile_workers_against_a_down_redis_warns_once(run_python, tmp_path):
    """The autotuner's compile workers are processes of their own: they inherit the parent's backoff rather
    than each warning again."""
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    child = run_python("""
import torch, autotune_kernels as K
x = torch.randn(48, 256); y = torch.empty_like(x)
K.scale(x, y)
print(torch.equal(y, x * 2), K.scale.stats["sweeps"], K.scale.workers)
""", env={"TILEGCN_REMOTE_CACHE": url, "TILEGCN_CACHE_DIR": str(tmp_path / "host-cache")})
    assert child.stdout.split() == ["True", "1", "2"]
    assert child.stderr.count("RemoteCacheWarning") == 1, child.stderr


def test_redis_killed_mid_write_leaves_only_whole_entries(tmp_path, monkeypatch, fresh_remote):
    """A persistent server (AOF, fsync always) is SIGSTOPped while a 48 MiB entry is being published, then
    killed with SIGKILL: the local build succeeds with one warning; the restarted server serves the entry
    published before, whole, and nothing of the half-written one."""
    server = _make_server(tmp_path, persist=True).start()
    monkeypatch.setenv("TILEGCN_REMOTE_CACHE", server.url)
    try:
        copy2d.cache_clear()
        _run_copy2d()  # entry A: published whole before the crash
        [key_a] = _kernel_keys(server)

        from tilegcn import cache as cache_module

        real = cache_module._publishable

        def big_and_stalled(entry):  # a big entry, sent to a server that stops reading and then dies
            server.proc.send_signal(signal.SIGSTOP)
            threading.Timer(0.5, server.proc.kill).start()
            return {**real(entry), "padding": os.urandom(48 << 20)}

        monkeypatch.setattr(cache_module, "_publishable", big_and_stalled)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _run_copy2d(rows=32)  # entry B: built locally, its publication cut off
        down = [str(w.message) for w in caught if issubclass(w.category, RemoteCacheWarning)]
        assert len(down) == 1 and "failed to publish a kernel" in down[0], down
        assert copy2d.cache_stats.compiles == 2
        server.kill()

        server.start()  # the same AOF folder
        assert _kernel_keys(server) == [key_a]
        assert set(server.client.hgetall(key_a)) == {b"kernel.ir", b"kernel.s", b"kernel.hsaco", b"meta.json"}
        remote_cache._stores.clear()  # a new process of the fleet: no backoff
        os.environ.pop(remote_cache.ENV_DOWN, None)
        monkeypatch.setenv("TILEGCN_CACHE_DIR", str(tmp_path / "host2-cache"))
        copy2d.cache_clear()
        _run_copy2d()
        assert (copy2d.cache_stats.compiles, copy2d.cache_stats.remote_hits) == (0, 1)
    finally:
        server.kill()


def test_a_writer_killed_mid_write_leaves_nothing(redis_server):
    """A process publishing a 48 MiB entry is killed with SIGKILL while the server is stalled mid-read: the
    server then sees a cut-off command and keeps nothing of it."""
    writer = subprocess.Popen([sys.executable, "-c", """
import os, sys
from tilegcn import remote_cache
store = remote_cache.store()
store.client.ping()  # connected (the handshake needs a running server)
print("connected", flush=True)
sys.stdin.readline()
store.publish_entry("f" * 64, {"kernel.ir": b"x", "kernel.s": b"x", "kernel.hsaco": os.urandom(48 << 20),
                               "meta.json": b"{}"})
print("done", flush=True)
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(tilegcn.__file__).parents[1])})
    try:
        assert writer.stdout.readline().strip() == "connected"
        redis_server.proc.send_signal(signal.SIGSTOP)
        writer.stdin.write("go\n")
        writer.stdin.flush()
        time.sleep(0.5)  # inside the single HSET: the stalled server's socket buffers are full
        assert writer.poll() is None
        writer.kill()
        writer.wait()
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)
    assert redis_server.client.ping()
    assert redis_server.client.exists(f"tilegcn:v1:kernel:{'f' * 64}") == 0


def test_a_second_host_gets_the_tuning_record_and_its_kernels(redis_server, run_python, tmp_path, monkeypatch):
    monkeypatch.setattr(K.scale, "workers", 1)
    K.scale.results.clear()
    K.scale.fn.cache_clear()
    x = torch.randn(48, 256)
    best = K.scale.tune(x, torch.empty_like(x))
    assert redis_server.client.keys("tilegcn:v1:tune:*")  # the record, published

    out = run_python("""
import torch, autotune_kernels as K
x = torch.randn(48, 256); y = torch.empty_like(x)
K.scale(x, y)
s = K.scale.fn.cache_stats
print(torch.equal(y, x * 2), K.scale.stats["sweeps"], K.scale.stats["remote_hits"], K.ranker.calls,
      s.compiles, s.remote_hits)
print(K.scale.tune(x, y))
""", env={"TILEGCN_CACHE_DIR": str(tmp_path / "host2-cache")}).stdout.splitlines()
    assert out[0].split() == ["True", "0", "1", "0", "0", "1"]  # no sweep, no ranking, no compile
    assert out[1] == str(best)
    [record] = (tmp_path / "host2-cache" / "tune").glob("*.json")
    assert json.loads(record.read_text())["origin"] == "remote"


def test_bad_settings_are_named(monkeypatch, fresh_remote):
    monkeypatch.setenv("TILEGCN_REMOTE_CACHE", "http://127.0.0.1:6379")
    copy2d.cache_clear()
    with pytest.raises(CacheError, match=r"not a Redis URL; write redis://host:port/db"):
        _run_copy2d()
    monkeypatch.setenv("TILEGCN_REMOTE_CACHE", "redis://127.0.0.1:6379/0")
    monkeypatch.setitem(sys.modules, "redis", None)  # as when the package is not installed
    copy2d.cache_clear()
    with pytest.raises(CacheError, match=r"redis package is not installed: pip install redis"):
        _run_copy2d()


def test_the_docs_example_runs_and_prints_what_the_page_says(run_python, fresh_remote):
    if shutil.which("redis-server") is None and os.environ.get("CI") != "true":
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server; `make install` does)")
    page = (Path(__file__).resolve().parents[1] / "docs" / "remote-cache.md").read_text()
    example = page.split("```python\n", 1)[1].split("```", 1)[0]
    promised = page.split("It prints\n\n```\n", 1)[1].split("```", 1)[0]
    assert run_python(example).stdout == promised
