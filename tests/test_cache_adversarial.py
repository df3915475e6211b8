"""The disk cache under attack: edited entries, `cache clear` in a folder holding user files, a clear under a
running process, stuck and killed lock holders (real subprocesses), damaged entries through the CLI, an
unsafe cache root. Each case is one a hostile tester found; each asserts what the user sees."""
import json
import os
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

KEY = make_key(ir="kernel k\n", arch="gfx950", options={}, llvm_version="22")


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
    assert "and 4 other tilegcn files" in out.stdout  # the lock, the temp dir, the probe memo, the key file
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
    keys = [make_key(ir=f"kernel k{i}\n", arch="gfx950", options={}, llvm_version="22") for i in range(4)]
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
    assert os.listdir(cache_dir) == []


def test_asm_prints_the_verified_bytes_even_when_not_utf8(subprocess_env):
    Cache().get_or_build(KEY, writer(asm=b"; caf\xe9\ns_endpgm\n"))
    out = _cli(["asm", KEY[:12]], subprocess_env)
    assert out.returncode == 0 and out.stdout == b"; caf\xe9\ns_endpgm\n"


# -- an unsafe cache root -----------------------------------------------------------------------------------
def test_a_root_others_can_write_is_used_with_a_warning_naming_the_fix(tmp_path, monkeypatch):
    root = tmp_path / "shared-cache"
    root.mkdir()
    os.chmod(root, 0o777)
    monkeypatch.setenv("TILEGCN_CACHE_DIR", str(root))
    monkeypatch.setattr(C, "_warned_roots", set())
    with pytest.warns(CacheWarning, match=f"{root} is unsafe: it is writable by others \\(mode 0777\\).*chmod 700"):
        Cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Cache()  # once per process
    os.chmod(root, 0o700)
    Cache()
    if os.getuid() == 0:
        os.chown(root, 4242, -1)
        with pytest.warns(CacheWarning, match="owned by uid 4242"):
            Cache()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700  # warned, never silently changed
