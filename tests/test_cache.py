"""The disk cache on its own: keys, atomic publish, locking, verification, the CLI."""
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from tilegcn import cache as C
from tilegcn.amdgcn.arch import get_arch
from tilegcn.cache import Cache, CacheWarning, make_key
from tilegcn.options import CompileOptions

KEY_ARGS = dict(ir="kernel k grid=(1, 1, 1)\n", options=CompileOptions("gfx950"), llvm_version="22.1.8")


def writer(ir="ir\n", asm="s_endpgm\n", hsaco=b"\x7fELF-bytes", meta=None, calls=None):
    """A build callback writing the three files (the cache's side of the contract)."""
    def build(tmp):
        if calls is not None:
            calls.append(tmp)
        (tmp / "kernel.ir").write_text(ir)
        (tmp / "kernel.s").write_text(asm)
        (tmp / "kernel.hsaco").write_bytes(hsaco)
        return dict(meta or {"name": "k", "arch": "gfx950", "grid": [1, 1, 1], "block": [64, 1, 1]})
    return build


def test_key_is_deterministic_and_sensitive_to_every_input():
    key = make_key(**KEY_ARGS)
    assert key == make_key(**KEY_ARGS) and len(key) == 64
    changed = [
        dict(KEY_ARGS, ir=KEY_ARGS["ir"] + " "),
        dict(KEY_ARGS, options=CompileOptions("gfx942")),
        dict(KEY_ARGS, options=CompileOptions("gfx950", schedule="plain")),
        dict(KEY_ARGS, options=CompileOptions("gfx950", copy="registers")),
        dict(KEY_ARGS, llvm_version="21.1.0"),
    ]
    keys = {make_key(**c) for c in changed}
    assert key not in keys and len(keys) == len(changed)
    # the same options however they are spelled: an arch table or its name, defaults given or not
    spelled = CompileOptions(get_arch("gfx950"), schedule="interleave", copy="auto")
    assert make_key(**dict(KEY_ARGS, options=spelled)) == key


def test_key_is_the_same_in_another_process(run_python):
    def key_here():
        C.compiler_hash.cache_clear()  # hash the sources as they are now, as the child will
        return make_key(**KEY_ARGS)

    before = key_here()
    child = run_python("from tilegcn.cache import make_key; from tilegcn.options import CompileOptions; "
                       f"print(make_key(**{KEY_ARGS!r}))").stdout.strip()
    assert child in (before, key_here())  # (either, should someone edit tilegcn's sources meanwhile)


def test_compiler_hash_follows_sources_and_templates(tmp_path, monkeypatch):
    import shutil
    pkg = tmp_path / "tilegcn"
    shutil.copytree(C._PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "templates").mkdir(exist_ok=True)
    monkeypatch.setattr(C, "_PACKAGE_DIR", pkg)
    hashes = []

    def digest():
        C.compiler_hash.cache_clear()
        hashes.append(C.compiler_hash())
        return hashes[-1]

    try:
        base = digest()
        assert digest() == base
        (pkg / "__pycache__").mkdir()
        (pkg / "__pycache__" / "x.pyc").write_bytes(b"junk")  # bytecode is not source
        assert digest() == base
        (pkg / "templates" / "descriptor.s").write_text(".amdhsa_kernel\n")
        with_template = digest()
        (pkg / "passes" / "__init__.py").write_text((pkg / "passes" / "__init__.py").read_text() + "# edit\n")
        with_edit = digest()
        assert len({base, with_template, with_edit}) == 3
    finally:
        monkeypatch.undo()
        C.compiler_hash.cache_clear()


def test_default_root_is_home_tilegcn_cache_mode_0700(monkeypatch, tmp_path):
    monkeypatch.delenv("TILEGCN_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    root = C.cache_dir()
    assert root == tmp_path / ".tilegcn" / "cache"
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


def test_build_once_then_hit(cache_dir):
    calls = []
    key = make_key(**KEY_ARGS)
    entry, built = Cache().get_or_build(key, writer(calls=calls))
    assert built and len(calls) == 1
    assert entry.path == cache_dir / key[:2] / key
    assert sorted(os.listdir(entry.path)) == ["kernel.hsaco", "kernel.ir", "kernel.s", "meta.json"]
    meta = json.loads(entry.meta_path.read_text())
    assert meta["key"] == key and meta["name"] == "k"
    import hashlib
    assert meta["hsaco_sha256"] == hashlib.sha256(b"\x7fELF-bytes").hexdigest()
    again, built = Cache().get_or_build(key, writer(calls=calls))
    assert not built and len(calls) == 1 and again.meta == entry.meta
    # nothing but the entry and its lock file beside it
    assert sorted(os.listdir(cache_dir / key[:2])) == sorted([key, f".{key}.lock"])


def test_failed_build_leaves_no_entry_and_next_build_works(cache_dir):
    key = make_key(**KEY_ARGS)

    def failing(tmp):
        (tmp / "kernel.ir").write_text("ir")
        (tmp / "kernel.s").write_text("asm")
        raise RuntimeError("assembler exploded")

    with pytest.raises(RuntimeError, match="exploded"):
        Cache().get_or_build(key, failing)
    shard = cache_dir / key[:2]
    assert not (shard / key).exists()
    assert [p for p in os.listdir(shard) if not p.endswith(".lock")] == []  # no temp dir left either
    assert Cache().load(key) is None
    entry, built = Cache().get_or_build(key, writer())
    assert built and entry.hsaco_path.read_bytes() == b"\x7fELF-bytes"


def test_build_that_forgets_a_file_is_an_error_not_an_entry(cache_dir):
    key = make_key(**KEY_ARGS)

    def incomplete(tmp):
        (tmp / "kernel.ir").write_text("ir")
        return {"name": "k"}

    with pytest.raises(C.CacheError, match="kernel.s"):
        Cache().get_or_build(key, incomplete)
    assert not (cache_dir / key[:2] / key).exists()


def test_killed_build_leaves_no_entry(cache_dir, run_python):
    key = make_key(**KEY_ARGS)
    code = textwrap.dedent(f"""
        import os, signal
        from tilegcn.cache import Cache
        def build(tmp):
            (tmp / "kernel.ir").write_text("ir")
            (tmp / "kernel.s").write_text("asm")
            os.kill(os.getpid(), signal.SIGKILL)
        Cache().get_or_build({key!r}, build)
    """)
    proc = run_python(code, check=False)
    assert proc.returncode == -9
    shard = cache_dir / key[:2]
    assert not (shard / key).exists()
    assert any(".tmp-" in p for p in os.listdir(shard))  # the torn temp dir is not an entry ...
    assert Cache().load(key) is None
    entry, built = Cache().get_or_build(key, writer())  # ... the lock died with the process ...
    assert built and entry.hsaco_path.is_file()
    assert not any(".tmp-" in p for p in os.listdir(shard))  # ... and the rebuild swept the leftovers
    assert [e.key for e in Cache().entries()] == [key]


def test_concurrent_processes_build_once(cache_dir, subprocess_env, tmp_path):
    key = make_key(**KEY_ARGS)
    log = tmp_path / "builds.log"
    code = textwrap.dedent(f"""
        import time
        from tilegcn.cache import Cache
        def build(tmp):
            with open({str(log)!r}, "a") as f:
                f.write("built\\n")
            time.sleep(0.5)
            (tmp / "kernel.ir").write_text("ir")
            (tmp / "kernel.s").write_text("asm")
            (tmp / "kernel.hsaco").write_bytes(b"elf")
            return {{"name": "k"}}
        entry, built = Cache().get_or_build({key!r}, build)
        print(entry.meta["hsaco_sha256"])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=subprocess_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(16)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert log.read_text() == "built\n"
    assert len({o[0] for o in outs}) == 1


@pytest.mark.parametrize("damage", ["corrupt_hsaco", "delete_hsaco", "garbage_meta", "delete_asm"])
def test_bad_entry_is_rebuilt_with_a_warning(cache_dir, damage):
    key = make_key(**KEY_ARGS)
    entry, _ = Cache().get_or_build(key, writer())
    if damage == "corrupt_hsaco":
        entry.hsaco_path.write_bytes(b"\x7fELF-bytez")
    elif damage == "delete_hsaco":
        entry.hsaco_path.unlink()
    elif damage == "garbage_meta":
        entry.meta_path.write_text("{not json")
    else:
        entry.asm_path.unlink()
    with pytest.warns(CacheWarning, match="rebuilding"):
        assert Cache().load(key) is None
    calls = []
    with pytest.warns(CacheWarning, match=str(entry.path)):
        fresh, built = Cache().get_or_build(key, writer(calls=calls))
    assert built and len(calls) == 1
    assert fresh.hsaco_path.read_bytes() == b"\x7fELF-bytes"
    assert Cache().load(key) is not None
    assert [p for p in os.listdir(cache_dir / key[:2]) if ".tmp-" in p] == []


def test_find_by_prefix_and_clear(cache_dir):
    k1 = make_key(**KEY_ARGS)
    k2 = make_key(**dict(KEY_ARGS, options=CompileOptions("gfx942")))
    Cache().get_or_build(k1, writer())
    Cache().get_or_build(k2, writer())
    assert Cache().find(k1[:10]).key == k1
    with pytest.raises(C.CacheError, match="no cache entry"):
        Cache().find("zz")
    assert {e.key for e in Cache().entries()} == {k1, k2}
    report = Cache().clear()
    assert sorted(report.removed) == sorted([cache_dir / k1[:2] / k1, cache_dir / k2[:2] / k2])
    assert report.left == [] and os.listdir(cache_dir) == [C.SECRET_FILE]  # locks and emptied shards went too
    assert Cache().entries() == []


def _cli(args, env):
    return subprocess.run([sys.executable, "-m", "tilegcn", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_cli_list_show_asm_clear(cache_dir, subprocess_env):
    key = make_key(**KEY_ARGS)
    Cache().get_or_build(key, writer(asm="; the kernel\ns_endpgm\n",
                                     meta={"name": "axpb", "arch": "gfx950", "grid": [2, 2, 1],
                                           "block": [256, 1, 1], "lds_bytes": 0, "vgprs": 8,
                                           "source": "k.py:3"}))
    out = _cli(["cache", "list"], subprocess_env)
    assert out.returncode == 0, out.stderr
    assert str(cache_dir) in out.stdout and key[:16] in out.stdout and "axpb" in out.stdout
    out = _cli(["cache", "show", key[:12]], subprocess_env)
    assert out.returncode == 0, out.stderr
    assert str(cache_dir / key[:2] / key) in out.stdout and '"grid"' in out.stdout and "k.py:3" in out.stdout
    out = _cli(["asm", key[:12]], subprocess_env)
    assert out.returncode == 0 and out.stdout == "; the kernel\ns_endpgm\n"
    assert str(cache_dir) in out.stderr
    out = _cli(["asm", "ffff"], subprocess_env)
    assert out.returncode != 0 and "no cache entry" in out.stderr
    out = _cli(["cache", "clear"], subprocess_env)
    assert out.returncode == 0 and "1" in out.stdout and str(cache_dir) in out.stdout
    assert Cache().entries() == []


def test_unwritable_cache_dir_is_a_cache_error_naming_the_fix(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    with pytest.raises(C.CacheError, match="TILEGCN_CACHE_DIR"):
        Cache(blocker, create=False).get_or_build(make_key(**KEY_ARGS), writer())
    monkeypatch.setenv("TILEGCN_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(C.CacheError, match="cannot create the cache dir"):
        Cache()
