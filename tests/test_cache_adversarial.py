"""The disk cache under attack: edited entries, `cache clear` in a folder holding user files, a clear under a
running process, stuck and killed lock holders (real subprocesses), damaged entries through the CLI, an
unsafe cache root. Each case is one a hostile tester found; each asserts what the user sees."""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

import kernels
import tilegcn
from tilegcn import cache as C
from tilegcn.cache import Cache, CacheWarning, make_key
from tilegcn.errors import CacheError
from tilegcn.options import CompileOptions

KEY = make_key(ir="kernel k\n", options=CompileOptions("gfx950"), llvm_version="22")


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")
    monkeypatch.setenv("TILEGCN_ARCH", "gfx950")


def writer(asm=b"s_endpgm\n", meta=None):
    def build(tmp):
        (tmp / "kernel.ir").write_text("kernel k\n")
        (tmp / "kernel.s").write_bytes(asm)
        (tmp / "kernel.hsaco").write_bytes(b"\x7fELF-bytes")
        return dict(meta or {"name": "k", "grid": [1, 1, 1], "block": [64, 1, 1], "created": 1.7e9})
    return build


def edit_meta(entry_path, change, keep_digest=False, resign=None):
    """Rewrite meta.json with `change(meta)` applied; `keep_digest` also recomputes meta_sha256, as a
    forger who read tilegcn's source would, and (unless resign=False) its HMAC with the cache's key file,
    as one who can also read that key would (the checks after the HMAC's are what such tests reach)."""
    path = entry_path / "meta.json"
    meta = json.loads(path.read_text())
    meta = change(meta) or meta
    if keep_digest and isinstance(meta, dict):
        meta["meta_sha256"] = C.meta_digest(meta)
        if resign is not False:
            meta["meta_hmac"] = C.sign(entry_path.parent.parent, {k: v for k, v in meta.items() if k != "meta_hmac"})
    path.write_text(json.dumps(meta))


SMALL = dict(block_M=64, block_N=32, threads=64)  # one small workgroup: quick to compile and emulate


def small_xy():
    x = torch.randn(40, 24)
    return x, torch.empty_like(x)


def relu_ref(x):
    return torch.relu(2.0 * x + 1.0)


# -- every file of an entry is verified ---------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["ir", "asm", "meta_grid", "meta_key"])
def test_an_edit_to_any_file_of_an_entry_is_detected_and_rebuilt(damage):
    entry, _ = Cache().get_or_build(KEY, writer())
    if damage == "ir":
        entry.ir_path.write_text("kernel evil\n")
    elif damage == "asm":
        entry.asm_path.write_text("s_nop 0\ns_endpgm\n")
    elif damage == "meta_grid":
        edit_meta(entry.path, lambda m: m.update(grid=[4096, 1, 1]))
    else:  # a consistent meta.json copied from another key
        edit_meta(entry.path, lambda m: m.update(key="ab" * 32), keep_digest=True)
    with pytest.warns(CacheWarning, match="rebuilding"):
        fresh, built = Cache().get_or_build(KEY, writer())
    assert built and fresh.meta["grid"] == [1, 1, 1]
    assert fresh.asm_path.read_bytes() == b"s_endpgm\n" and fresh.ir_path.read_text() == "kernel k\n"


def test_edited_meta_args_cannot_make_a_kernel_write_its_input():
    """The reported defect: swapping the argument names in meta.json made the kernel write into X."""
    x, y = small_xy()
    k = tilegcn.jit(kernels.axpb_relu.fn).compile(x, y, **SMALL)
    x_before = x.clone()
    for keep_digest in (False, True):  # a plain edit, and one that also rewrites the digest
        edit_meta(Path(k.cache_path), lambda m: m.update(args=m["args"][::-1]), keep_digest)
        f = tilegcn.jit(kernels.axpb_relu.fn)
        with pytest.warns(CacheWarning, match="meta_sha256" if not keep_digest else "args"):
            f(x, y, **SMALL)
        assert f.cache_stats.compiles == 1
        assert torch.equal(x, x_before)
        torch.testing.assert_close(y, relu_ref(x))


def test_a_whole_entry_of_another_kernel_under_this_key_is_refused(cache_dir):
    """A self-consistent entry (digests recomputed) of a different kernel planted in this key's folder."""
    x, y = small_xy()
    good = tilegcn.jit(kernels.axpb_relu.fn).compile(x, y, **SMALL)
    other = tilegcn.jit(kernels.copy2d.fn).compile(x, y, **SMALL)
    target = Path(good.cache_path)
    for name in C.FILES:
        (target / name).write_bytes((Path(other.cache_path) / name).read_bytes())
    edit_meta(target, lambda m: m.update(key=good.key), keep_digest=True)
    f = tilegcn.jit(kernels.axpb_relu.fn)
    with pytest.warns(CacheWarning, match="kernel.ir is not the IR"):
        f(x, y, **SMALL)
    torch.testing.assert_close(y, relu_ref(x))  # relu(2x+1), not a copy


DAMAGED_META = {
    "json_string": lambda m: "a JSON string",
    "json_list": lambda m: [1, 2],
    "no_grid": lambda m: {k: v for k, v in m.items() if k != "grid"},  # hsaco digest intact: was a KeyError
    "grid_a_string": lambda m: m.update(grid="2x2"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED_META))
def test_damaged_meta_json_through_jit_is_a_rebuild_not_a_key_error(damage):
    x, y = small_xy()
    k = tilegcn.jit(kernels.axpb_relu.fn).compile(x, y, **SMALL)
    edit_meta(Path(k.cache_path), DAMAGED_META[damage])
    f = tilegcn.jit(kernels.axpb_relu.fn)
    with pytest.warns(CacheWarning, match="meta.json"):
        f(x, y, **SMALL)
    assert f.cache_stats.compiles == 1
    torch.testing.assert_close(y, relu_ref(x))


def test_launch_uses_the_verified_bytes_not_a_later_read_of_the_file():
    x, y = small_xy()
    k = tilegcn.jit(kernels.axpb_relu.fn).compile(x, y, **SMALL)
    with open(k.hsaco_path, "wb") as fh:  # replaced after verification, before the first launch
        fh.write(b"\x7fELF not the verified code object")
    k(x, y)
    torch.testing.assert_close(y, relu_ref(x))


# -- cache clear --------------------------------------------------------------------------------------------
def test_compiled_kernels_keep_working_after_cache_clear(cache_dir):
    x, y = small_xy()
    f = tilegcn.jit(kernels.axpb_relu.fn)
    k = f.compile(x, y, **SMALL)
    asm = k.asm
    assert Cache().clear().removed == [Path(k.cache_path)]
    assert not os.path.exists(k.hsaco_path)
    k(x, y)  # first launch after the clear: the code object is in memory
    torch.testing.assert_close(y, relu_ref(x))
    assert k.asm == asm and "axpb_relu" in k.asm
    y.zero_()
    f(x, y, **SMALL)
    torch.testing.assert_close(y, relu_ref(x))
    x2 = torch.randn(8, 16)  # a new specialisation after the clear compiles into the emptied cache
    y2 = torch.empty_like(x2)
    f(x2, y2, **SMALL)
    torch.testing.assert_close(y2, relu_ref(x2))
    assert [e.key for e in Cache().entries()] == [f.compile(x2, y2, **SMALL).key]


def _plant_user_files(root):
    """What a user might keep in (or point TILEGCN_CACHE_DIR at): two-character folders included."""
    (root / "ab").mkdir(parents=True, exist_ok=True)
    (root / "ab" / "notes.txt").write_text("mine")
    (root / "zz").mkdir()
    (root / "zz" / "data.bin").write_bytes(b"mine")
    (root / "my-project").mkdir()
    (root / "README").write_text("mine")
    lookalike = root / KEY[:2] / (KEY[:2] + "0" * 62)  # named like an entry, holds user data
    lookalike.mkdir(parents=True)
    (lookalike / "thesis.tex").write_text("mine")
    victim = root / "victim"
    victim.mkdir()
    (victim / "precious").write_text("mine")
    (root / KEY[:2] / (KEY[:2] + "1" * 62)).symlink_to(victim, target_is_directory=True)
    return [root / "ab" / "notes.txt", root / "zz" / "data.bin", root / "my-project", root / "README",
            lookalike / "thesis.tex", victim / "precious"]


def test_clear_removes_only_what_tilegcn_wrote_and_says_what_it_kept(cache_dir, subprocess_env):
    Cache().get_or_build(KEY, writer())
    (cache_dir / C.PROBE_MEMO).write_text("{}")
    (cache_dir / "tune").mkdir()  # autotuning results: another command's to clear
    stale_tmp = cache_dir / KEY[:2] / f".{KEY}.tmp-abc123"  # left by a killed build
    stale_tmp.mkdir()
    user_files = _plant_user_files(cache_dir)
    out = subprocess.run([sys.executable, "-m", "tilegcn", "cache", "clear"], capture_output=True, text=True,
                         env=subprocess_env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert all(p.exists() for p in user_files)
    assert not (cache_dir / KEY[:2] / KEY).exists() and not stale_tmp.exists()
    assert not (cache_dir / C.PROBE_MEMO).exists()
    assert "removed 1 entries" in out.stdout and str(cache_dir / KEY[:2] / KEY) in out.stdout
    assert "and 3 other tilegcn files" in out.stdout  # the lock, the temp dir, the probe memo
    for kept in ("ab/notes.txt", "zz", "my-project", "README", "victim"):
        assert f"kept {cache_dir / kept}: not written by tilegcn" in out.stdout, out.stdout
    assert "thesis.tex" in out.stdout and "symbolic link" in out.stdout and "tune clear" in out.stdout
    assert [e.problem for e in Cache().entries()] == ["meta.json is missing"]  # the look-alike, kept


# -- locks: a stuck holder, a killed holder -----------------------------------------------------------------
HOLDER = textwrap.dedent("""
    import os, signal, sys, time
    from tilegcn.cache import Cache
    def build(tmp):
        print("holding", flush=True)
        if sys.argv[2] == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(120)
    Cache().get_or_build(sys.argv[1], build)
""")


def _start_holder(env, how):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, KEY, how], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def _wait_stopped(pid, deadline=20.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T":
            return
        time.sleep(0.02)
    raise AssertionError("the holder did not stop")


def test_a_stopped_lock_holder_times_out_naming_it_and_is_left_alone_by_clear(subprocess_env, cache_dir):
    proc = _start_holder(subprocess_env, "stop")
    try:
        _wait_stopped(proc.pid)
        t0 = time.monotonic()
        with pytest.raises(CacheError) as err:
            Cache(lock_timeout=0.5).get_or_build(KEY, writer())
        assert time.monotonic() - t0 < 10
        msg = str(err.value)
        lock = cache_dir / KEY[:2] / f".{KEY}.lock"
        assert str(lock) in msg and f"pid {proc.pid}" in msg and "stopped" in msg
        assert C.ENV_LOCK_TIMEOUT in msg
        report = Cache().clear()  # never pulls the lock or the build out from under its holder
        assert report.removed == [] and lock.exists()
        assert any(p == lock and f"pid {proc.pid}" in why for p, why in report.left)
    finally:
        proc.kill()
        proc.wait(30)
    entry, built = Cache(lock_timeout=10).get_or_build(KEY, writer())  # the kernel freed the dead one's lock
    assert built and entry.hsaco_path.read_bytes() == b"\x7fELF-bytes"
    assert not (cache_dir / KEY[:2] / f".{KEY}.holder").exists()


def test_a_waiter_says_who_it_waits_for_and_goes_on_when_the_holder_is_killed(subprocess_env, monkeypatch):
    monkeypatch.setattr(C, "LOCK_NOTICE_S", 0.2)
    proc = _start_holder(subprocess_env, "sleep")
    killer = threading.Timer(1.0, proc.kill)
    killer.start()
    try:
        t0 = time.monotonic()
        with pytest.warns(CacheWarning, match=f"waiting for the cache lock .* held by pid {proc.pid} .*running"):
            entry, built = Cache(lock_timeout=60).get_or_build(KEY, writer())
        assert built and 0.9 < time.monotonic() - t0 < 30
    finally:
        killer.cancel()
        proc.kill()
        proc.wait(30)


def test_bad_lock_timeout_setting_is_named(monkeypatch):
    monkeypatch.setenv(C.ENV_LOCK_TIMEOUT, "soon")
    with pytest.raises(CacheError, match=f"{C.ENV_LOCK_TIMEOUT}='soon'"):
        Cache()


def test_a_lock_won_on_a_file_cache_clear_just_unlinked_is_not_taken_as_held(tmp_path, monkeypatch):
    """clear unlinks a lock file while holding it; a waiter that opened the old file before and wins its
    flock afterwards holds nothing: it must try again on the new file (held here by another builder)."""
    from filelock import FileLock, Timeout

    path = tmp_path / ".k.lock"
    lock = FileLock(str(path))
    real_acquire = lock.acquire
    other_holds, other_may_go = threading.Event(), threading.Event()

    def other_builder():
        with FileLock(str(path)):
            other_holds.set()
            other_may_go.wait(30)

    def acquire_then_lose_the_file(*args, **kwargs):
        result = real_acquire(*args, **kwargs)
        if not other_holds.is_set():  # the first time: clear swaps the file, another builder takes it
            path.unlink()
            threading.Thread(target=other_builder, daemon=True).start()
            other_holds.wait(30)
        return result

    monkeypatch.setattr(lock, "acquire", acquire_then_lose_the_file)
    with pytest.raises(Timeout):
        C._acquire_current(lock, path, 0.3)
    assert not lock.is_locked
    other_may_go.set()
    C._acquire_current(lock, path, 10)  # the current file, once the other builder is done
    assert lock.is_locked
    lock.release()


RACER = textwrap.dedent("""
    import sys, warnings
    from tilegcn.cache import Cache
    warnings.simplefilter("ignore")  # "rebuilding" warnings are expected while entries vanish
    def build(tmp):
        (tmp / "kernel.ir").write_text("kernel k\\n")
        (tmp / "kernel.s").write_bytes(b"s_endpgm\\n")
        (tmp / "kernel.hsaco").write_bytes(b"\\x7fELF-bytes")
        return {"name": "k"}
    builds = 0
    for _ in range(int(sys.argv[2])):
        entry, built = Cache().get_or_build(sys.argv[1], build)
        assert entry.data["kernel.hsaco"] == b"\\x7fELF-bytes" and entry.meta["name"] == "k", entry
        builds += built
    print(builds)
""")


def test_builders_and_loaders_racing_cache_clear_always_get_a_sound_entry(subprocess_env, cache_dir):
    racers = [subprocess.Popen([sys.executable, "-c", RACER, KEY, "60"], env=subprocess_env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    clears = removed = 0
    while any(p.poll() is None for p in racers):
        report = Cache().clear()
        clears, removed = clears + 1, removed + len(report.removed)
        assert all(why.startswith("in use") for _, why in report.left), report.left
        time.sleep(0.02)
    outs = [p.communicate(timeout=60) for p in racers]
    assert all(p.returncode == 0 for p in racers), "\n".join(o[1][-3000:] for o in outs)
    assert removed > 0 and sum(int(o[0]) for o in outs) >= removed  # entries were cleared and rebuilt


SLOW_BUILDER = textwrap.dedent("""
    import sys, time
    from tilegcn.cache import Cache
    def build(tmp):
        for name, data in (("kernel.ir", b"kernel k\\n"), ("kernel.s", b"s_endpgm\\n"),
                           ("kernel.hsaco", b"\\x7fELF-bytes")):
            (tmp / name).write_bytes(data)
            time.sleep(0.01)
        return {"name": "k"}
    print("start", flush=True)
    Cache().get_or_build(sys.argv[1], build)
""")


def test_kill_9_at_any_moment_never_leaves_an_entry_that_passes_for_sound(subprocess_env, cache_dir):
    import random

    rng = random.Random(11)
    for trial in range(6):
        proc = subprocess.Popen([sys.executable, "-c", SLOW_BUILDER, KEY], env=subprocess_env, text=True,
                                stdout=subprocess.PIPE)
        assert proc.stdout.readline() == "start\n"
        time.sleep(rng.uniform(0.0, 0.06))  # before, during or after the build and the publish
        proc.kill()
        proc.wait(30)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            entry = Cache().load(KEY)
        assert entry is None or entry.data["kernel.hsaco"] == b"\x7fELF-bytes"
        assert all(e.problem is None for e in Cache().entries())
        if entry is not None:
            Cache().clear()
    entry, _ = Cache(lock_timeout=10).get_or_build(KEY, writer())  # no lock left held by the dead
    assert entry.data["kernel.hsaco"] == b"\x7fELF-bytes"


# -- the CLI on damaged entries -----------------------------------------------------------------------------
def _cli(args, env):
    return subprocess.run([sys.executable, "-m", "tilegcn", *args], capture_output=True, env=env, timeout=60)


def test_cli_reports_bad_entries_and_goes_on(cache_dir, subprocess_env):
    keys = [make_key(ir=f"kernel k{i}\n", options=CompileOptions("gfx950"), llvm_version="22") for i in range(4)]
    entries = [Cache().get_or_build(k, writer())[0] for k in keys]
    edit_meta(entries[0].path, lambda m: "a JSON string")
    edit_meta(entries[1].path, lambda m: m.update(created="yesterday"), keep_digest=True)  # still sound
    entries[2].asm_path.write_bytes(b"\xff\xfe not utf-8\n")
    out = _cli(["cache", "list"], subprocess_env)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert "4 entries, 2 bad" in text
    assert f"{keys[0][:16]}  BAD ENTRY: meta.json holds a JSON str" in text
    assert f"{keys[2][:16]}  BAD ENTRY: kernel.s does not match" in text
    date = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1.7e9))
    lines = {line[:16]: line for line in text.splitlines()}
    assert date in lines[keys[3][:16]] and date not in lines[keys[1][:16]]  # "?" for the bad date
    for bad in (keys[0], keys[2]):
        for cmd in (["asm", bad[:12]], ["cache", "show", bad[:12]]):
            out = _cli(cmd, subprocess_env)
            assert out.returncode == 1 and b"is bad" in out.stderr and b"Traceback" not in out.stderr
    out = _cli(["asm", keys[1][:12]], subprocess_env)
    assert out.returncode == 0 and out.stdout == b"s_endpgm\n"
    out = _cli(["cache", "clear"], subprocess_env)
    assert out.returncode == 0 and b"removed 4 entries" in out.stdout, out.stderr
    assert os.listdir(cache_dir) == [C.SECRET_FILE]  # the cache's key stays


def test_asm_prints_the_verified_bytes_even_when_not_utf8(subprocess_env):
    Cache().get_or_build(KEY, writer(asm=b"; caf\xe9\ns_endpgm\n"))
    out = _cli(["asm", KEY[:12]], subprocess_env)
    assert out.returncode == 0 and out.stdout == b"; caf\xe9\ns_endpgm\n"


# -- an unsafe cache root, files and the override (issue 18) ------------------------------------------------------
def _planted_root(tmp_path, monkeypatch, key):
    """A root holding a sound entry for `key` (made while it was private), and `C` state of a new process."""
    root = tmp_path / "shared-cache"
    monkeypatch.setenv("TILEGCN_CACHE_DIR", str(root))
    monkeypatch.setattr(C, "_warned_roots", set())
    Cache().get_or_build(key, writer(asm=b"; planted\ns_endpgm\n"))
    return root


@pytest.mark.parametrize("how", ["world_writable", "group_writable", "other_owner"])
def test_a_root_another_user_can_write_is_not_loaded_from(tmp_path, monkeypatch, how):
    # the fallback is per process
    key = make_key(ir=f"kernel {how}\n", options=CompileOptions("gfx950"), llvm_version="22")
    root = _planted_root(tmp_path, monkeypatch, key)
    if how == "other_owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another uid needs root")
        os.chown(root, 4242, -1)
        pattern = "it is owned by uid 4242"
    else:
        os.chmod(root, 0o777 if how == "world_writable" else 0o770)
        pattern = "it is writable by others \\(mode 0(777|770)\\)"
    with pytest.warns(CacheWarning, match=f"{root} is unsafe: {pattern}.*does not use it.*chmod 700"):
        cache = Cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Cache().root == cache.root  # said once per process; the same private folder
    assert cache.root != root and stat.S_IMODE(os.stat(cache.root).st_mode) == 0o700
    assert cache.load(key) is None  # the planted entry is not loaded ...
    entry, built = Cache().get_or_build(key, writer())
    assert built and entry.data["kernel.s"] == b"s_endpgm\n"  # ... a private one is built instead
    assert os.stat(root).st_uid == (4242 if how == "other_owner" else os.getuid())  # never changed
    os.chown(root, os.getuid(), -1)
    os.chmod(root, 0o700)
    assert Cache().root == root  # fixed: used again


def test_files_and_folders_are_private_whatever_the_umask(tmp_path, monkeypatch):
    from tilegcn import toolchain

    monkeypatch.delenv("TILEGCN_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    old = os.umask(0)
    try:
        root = C.cache_dir()
        entry, _ = Cache().get_or_build(KEY, writer())
        toolchain._probe.__wrapped__(toolchain.find_llvm("gfx950").mc)  # writes llvm-probe.json
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in [tmp_path / ".tilegcn", *(tmp_path / ".tilegcn").rglob("*")]}
    assert f".tilegcn/cache/{C.PROBE_MEMO}" in modes and f".tilegcn/cache/{C.SECRET_FILE}" in modes
    assert f".tilegcn/cache/{KEY[:2]}/{KEY}/kernel.s" in modes and root.exists()
    loose = {p: oct(m) for p, m in modes.items() if m != (0o700 if (tmp_path / p).is_dir() else 0o600)}
    assert loose == {}


def test_a_planted_holder_link_is_never_written_through(cache_dir):
    victim = cache_dir.parent / "victim.txt"
    victim.write_text("the user's file\n")
    (cache_dir / KEY[:2]).mkdir(parents=True)
    (cache_dir / KEY[:2] / f".{KEY}.holder.{os.getpid()}").symlink_to(victim)
    entry, built = Cache().get_or_build(KEY, writer())
    assert built and victim.read_text() == "the user's file\n"


def test_a_symlinked_entry_is_foreign_not_loaded(cache_dir, tmp_path):
    entry, _ = Cache().get_or_build(KEY, writer())
    elsewhere = tmp_path / "elsewhere"
    os.rename(entry.path, elsewhere)
    entry.path.symlink_to(elsewhere)
    with pytest.raises(CacheError, match=f"{entry.path} is a symbolic link.*rm {entry.path}"):
        Cache().load(KEY)
    assert Cache().entries() == []  # not listed ...
    assert any(p == entry.path for p, _ in Cache().clear().left)  # ... and kept by clear: foreign throughout
    assert (elsewhere / "kernel.s").exists()


@pytest.mark.parametrize("how", ["swapped", "copied_from_another_cache"])
def test_an_entry_not_signed_by_this_cache_is_rebuilt(cache_dir, tmp_path, how):
    """kernel.s/kernel.hsaco of another entry with every digest recomputed (k.asm would show code that does
    not run), or a whole entry from another cache: consistent, but not signed with this cache's key."""
    entry, _ = Cache().get_or_build(KEY, writer())
    if how == "swapped":
        (entry.path / "kernel.s").write_bytes(b"v_evil\ns_endpgm\n")
        edit_meta(entry.path, lambda m: m.update(asm_sha256=C._sha256(b"v_evil\ns_endpgm\n")),
                  keep_digest=True, resign=False)
    else:
        other = Cache(tmp_path / "other-cache")
        foreign, _ = other.get_or_build(KEY, writer(asm=b"v_evil\ns_endpgm\n"))
        shutil.rmtree(entry.path)
        shutil.copytree(foreign.path, entry.path)
    with pytest.warns(CacheWarning, match="not signed with this cache's key.*rebuilding"):
        fresh, built = Cache().get_or_build(KEY, writer())
    assert built and fresh.data["kernel.s"] == b"s_endpgm\n"


_LIMITED = """
import resource, os, sys, warnings
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # an endless read ends in MemoryError, not the OOM killer
from tilegcn.cache import Cache, CacheWarning
from tilegcn import toolchain
{body}
"""


@pytest.mark.parametrize("victim", ["kernel.s", "meta.json", "kernel.hsaco"])
def test_entry_files_are_read_with_a_limit_never_from_dev_zero_or_a_fifo(cache_dir, subprocess_env, victim):
    entry, _ = Cache().get_or_build(KEY, writer())
    (entry.path / victim).unlink()
    if victim == "kernel.hsaco":
        os.mkfifo(entry.path / victim)  # opening it to read would wait forever for a writer
    else:
        (entry.path / victim).symlink_to("/dev/zero")
    body = f"""
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print(Cache().load({KEY!r}))
print([str(w.message) for w in caught])
"""
    out = subprocess.run([sys.executable, "-c", _LIMITED.format(body=body)], env=subprocess_env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("None") and "rebuilding" in out.stdout
    assert ("symbolic link" if victim != "kernel.hsaco" else "not a regular file") in out.stdout


def test_read_limited_names_what_it_refuses(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1001)
    with pytest.raises(C.UnreadableFileError, match=f"{big} is larger than the 1000 bytes"):
        C.read_limited(big, 1000)
    assert C.read_limited(big, 1001) == b"x" * 1001
    with pytest.raises(C.UnreadableFileError, match="not a regular file"):
        C.read_limited("/dev/zero", 1000)
    assert issubclass(C.UnreadableFileError, OSError) and issubclass(C.UnreadableFileError, CacheError)


@pytest.mark.parametrize("memo", [["0.0", False], [5, True], ["99.9", True], 3, "[1, 2]", "/dev/zero"])
def test_a_bad_llvm_probe_memo_is_probed_again_with_a_warning(cache_dir, subprocess_env, memo):
    """Each once gave a raw error in every compile, blamed the LLVM install, or put a fake version into the
    cache keys."""
    from tilegcn import toolchain

    real = toolchain.find_llvm("gfx950")
    memo_path = C.cache_dir() / C.PROBE_MEMO
    if memo == "/dev/zero":
        memo_path.symlink_to("/dev/zero")
    elif memo == "[1, 2]":
        memo_path.write_text(memo)
    else:
        memo_path.write_text(json.dumps({toolchain._probe_key(real.mc): memo}))
    body = f"""
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    llvm = toolchain.find_llvm("gfx950")
print(llvm.version, [str(w.message) for w in caught])
"""
    out = subprocess.run([sys.executable, "-c", _LIMITED.format(body=body)], env=subprocess_env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(real.version + " ") and "probing llvm-mc again" in out.stdout


def _without_root_powers():
    """preexec_fn: as root, drop the capabilities that ignore file modes (so a mode-0000 folder is unreadable,
    as for any other user). None when not root (the modes already apply)."""
    if os.geteuid() != 0:
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def drop():
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH; PR_CAPBSET_DROP = 24
            if libc.prctl(24, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    return drop


def test_an_unreadable_root_is_an_error_not_0_entries(cache_dir, subprocess_env):
    Cache().get_or_build(KEY, writer())
    os.chmod(cache_dir, 0)
    try:
        runs = [subprocess.run([sys.executable, *args], env=subprocess_env, capture_output=True, text=True,
                               timeout=60, preexec_fn=_without_root_powers(), cwd=C._PACKAGE_DIR.parent)
                for args in (["-m", "tilegcn", "cache", "list"],
                             ["-c", f"from tilegcn.cache import *; Cache().get_or_build({KEY!r}, None)"])]
    finally:
        os.chmod(cache_dir, 0o700)
    for out in runs:
        assert out.returncode != 0 and "entries" not in out.stdout, out.stdout
        assert f"cannot read the cache dir {cache_dir}" in out.stderr and "chmod 700" in out.stderr, out.stderr[-1500:]
        assert "Traceback" not in out.stderr or "CacheError" in out.stderr


def test_a_file_size_limit_while_writing_an_entry_is_a_cache_error(cache_dir, subprocess_env):
    code = f"""
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so that a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, 16 << 10))
from tilegcn.cache import Cache
from tilegcn.errors import CacheError
def build(tmp):
    (tmp / "kernel.ir").write_text("kernel k\\n")
    (tmp / "kernel.s").write_text("s_nop 0\\n" * 8192)  # 64 KiB
    (tmp / "kernel.hsaco").write_bytes(b"\\x7fELF")
    return {{}}
try:
    Cache().get_or_build({KEY!r}, build)
except CacheError as e:
    print("CacheError:", e)
"""
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("CacheError:"), out.stderr[-1500:]
    assert "File too large" in out.stdout and "ulimit -f" in out.stdout
    assert Cache().load(KEY) is None and not list((cache_dir / KEY[:2]).glob(f".{KEY}.tmp-*"))


def _override_kernel(monkeypatch, folder, make_file):
    """Compile the small kernel with TILEGCN_ASM_OVERRIDE=folder after `make_file(path, asm)` placed the
    override for its key; (kernel, warnings)."""
    x, y = small_xy()
    generated = tilegcn.jit(kernels.axpb_relu.fn).compile(x, y, **SMALL)
    folder.mkdir(exist_ok=True)
    make_file(folder / f"{generated.key}.s", generated.asm + "\n; edited by hand\n")
    monkeypatch.setenv("TILEGCN_ASM_OVERRIDE", str(folder))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tilegcn.jit(kernels.axpb_relu.fn).compile(x, y, **SMALL)
    return kernel, [str(w.message) for w in caught]


def test_an_asm_override_in_use_is_announced_naming_the_kernel(tmp_path, monkeypatch):
    kernel, caught = _override_kernel(monkeypatch, tmp_path / "edits", lambda p, asm: p.write_text(asm))
    assert "asm_override" in kernel.metadata and kernel.asm.endswith("; edited by hand\n")
    notice = [m for m in caught if "runs the hand-edited" in m]
    assert len(notice) == 1 and "axpb_relu" in notice[0] and f"{kernel.metadata['overrides'][:16]}" in notice[0]


def _foreign(path, asm):
    path.write_text(asm)
    os.chown(path, 4242, -1)


def _linked_out(path, asm):
    outside = path.parent.parent / "outside.s"
    outside.write_text(asm)
    path.symlink_to(outside)


@pytest.mark.parametrize("how", ["folder_world_writable", "file_world_writable", "file_of_another_user",
                                 "link_out_of_the_folder"])
def test_an_unsafe_asm_override_is_not_used(tmp_path, monkeypatch, how):
    folder = tmp_path / "edits"
    if how == "file_of_another_user" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    make = {"folder_world_writable": lambda p, asm: (p.write_text(asm), os.chmod(p.parent, 0o777)),
            "file_world_writable": lambda p, asm: (p.write_text(asm), os.chmod(p, 0o666)),
            "file_of_another_user": _foreign, "link_out_of_the_folder": _linked_out}[how]
    kernel, caught = _override_kernel(monkeypatch, folder, make)
    assert "asm_override" not in kernel.metadata and "edited by hand" not in kernel.asm
    why = {"folder_world_writable": "the folder .* writable by others", "file_world_writable": "the file: it is "
           "writable by others", "file_of_another_user": "owned by uid 4242", "link_out_of_the_folder":
           "symbolic link leading out of the folder"}[how]
    assert any(re.search(f"not using .*{why}.*the generated code runs", m) for m in caught), caught
