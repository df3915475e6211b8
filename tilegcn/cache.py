"""Content-addressed disk cache of compiled kernels.

Layout: ``<root>/<key[:2]>/<key>/`` holding ``kernel.ir``, ``kernel.s``, ``kernel.hsaco`` and ``meta.json``;
beside each entry its lock file ``.<key>.lock`` and, while a process holds it, ``.<key>.holder`` (pid, host,
start time, command line). The root is ``$TILEGCN_CACHE_DIR``, else ``~/.tilegcn/cache`` (created with mode
0700; an existing root that others can write is used with a `CacheWarning`).

The key (`make_key`) is a sha256 over everything that decides the bytes of the code object and nothing
else: the tilegcn version, a hash of the compiler's own sources, the canonical IR text, the arch, the
compile options and the LLVM version. Nothing process-dependent (ids, temp paths, dict order) enters it.

Writes are atomic: an entry is built in a temp dir beside it and published with one ``os.rename``;
a ``filelock`` per key makes concurrent processes build it once. A waiter gives up after
``$TILEGCN_CACHE_LOCK_TIMEOUT`` seconds with a CacheError naming the lock and its holder; a lock whose
holder died is free at once (the kernel drops a dead process's ``flock``).

Loads verify the whole entry before anything in it is used: ``meta.json`` records the sha256 of the
three other files and of its own canonical content (``meta_sha256``) and the key it belongs to; the
caller may add its own check (the jit compares kernel.ir with the IR it traced and the launch fields
with the traced kernel). A verified `Entry` holds the bytes it verified, so nothing is re-read from disk
later. A bad entry is rebuilt with a `CacheWarning`, never a crash.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

from filelock import FileLock, Timeout

from . import __version__
from .errors import CacheError

ENV_CACHE_DIR = "TILEGCN_CACHE_DIR"
ENV_LOCK_TIMEOUT = "TILEGCN_CACHE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 600.0
LOCK_NOTICE_S = 5.0  # a waiter says who it waits for after this long, then keeps waiting
FILES = ("kernel.ir", "kernel.s", "kernel.hsaco", "meta.json")
DIGEST_FIELDS = {"kernel.ir": "ir_sha256", "kernel.s": "asm_sha256", "kernel.hsaco": "hsaco_sha256"}
PROBE_MEMO = "llvm-probe.json"  # toolchain.py's memo of LLVM probes, kept in the root
# other tilegcn data in the root that `clear` leaves to its own command
OTHER_OWNERS = {"tune": "autotuning results: `python -m tilegcn tune clear` removes them"}
_PACKAGE_DIR = Path(__file__).resolve().parent
_TMP_MARK = ".tmp-"
_KEY = re.compile(r"[0-9a-f]{64}")
_SHARD = re.compile(r"[0-9a-f]{2}")
# what tilegcn writes inside a shard, by name: the entry, its lock, its holder record, its temp dirs
_SHARD_ITEM = re.compile(r"(?P<key>[0-9a-f]{64})|\.(?P<key2>[0-9a-f]{64})(?P<kind>\.lock|\.holder(\.\d+)?|\.tmp-.*)")
_PROBE_TMP = re.compile(re.escape(PROBE_MEMO) + r"\.\d+\.tmp")


class CacheWarning(UserWarning):
    """A cache entry was unreadable or corrupted and is being rebuilt, the cache root is unsafe, or a
    process waits for another one's cache lock."""


def cache_dir(create: bool = True) -> Path:
    """The cache root: $TILEGCN_CACHE_DIR, else ~/.tilegcn/cache (made with mode 0700 when `create`)."""
    env = os.environ.get(ENV_CACHE_DIR)
    root = Path(env).expanduser() if env else Path.home() / ".tilegcn" / "cache"
    if create:
        _make_root(root)
    _warn_if_unsafe(root)
    return root


def _make_root(root: Path) -> None:
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
    except OSError as e:
        raise CacheError(f"tilegcn: cannot create the cache dir {root}: {e}; "
                         f"set {ENV_CACHE_DIR} to a writable folder") from e


_warned_roots: set = set()


def _warn_if_unsafe(root: Path) -> None:
    """Warn (once per root and process) when others could plant a code object in the cache: a root that
    is group/world-writable or owned by another user."""
    try:
        st = os.stat(root)
    except OSError:
        return  # absent: made with 0700 when first written
    problems = []
    if st.st_mode & 0o022:
        problems.append(f"it is writable by others (mode {st.st_mode & 0o7777:04o})")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        problems.append(f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()})")
    if problems and (str(root), tuple(problems)) not in _warned_roots:
        _warned_roots.add((str(root), tuple(problems)))
        warnings.warn(
            f"tilegcn: the cache dir {root} is unsafe: {'; '.join(problems)}, so another user could replace "
            f"a kernel in it. Fix: chmod 700 {root} (as its owner), or set {ENV_CACHE_DIR} to a folder "
            f"only you can write", CacheWarning, stacklevel=3)


@functools.lru_cache(maxsize=None)
def compiler_hash() -> str:
    """sha256 over the compiler's own sources (tilegcn/**/*.py and templates/*); once per process."""
    h = hashlib.sha256()
    files = sorted(
        p for p in _PACKAGE_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
        and (p.suffix == ".py" or p.parent.name == "templates")
    )
    for p in files:
        rel = p.relative_to(_PACKAGE_DIR).as_posix().encode()
        data = p.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def make_key(ir: str, arch: str, options: dict, llvm_version: str) -> str:
    """The cache key of one compile. `options` must be JSON-able (it is serialised with sorted keys)."""
    blob = json.dumps(
        {
            "tilegcn": __version__,
            "compiler": compiler_hash(),
            "ir": ir,
            "arch": arch,
            "options": options,
            "llvm": llvm_version,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def meta_digest(meta: dict) -> str:
    """sha256 of meta.json's canonical content (sorted keys, compact), its own `meta_sha256` left out."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


@dataclasses.dataclass(frozen=True)
class Entry:
    """A cache entry. From `load`/`get_or_build`/`find` it is verified and `data` holds the verified bytes
    of kernel.ir, kernel.s and kernel.hsaco; `entries()` also lists bad ones (`problem` says why)."""

    key: str
    path: Path
    meta: dict
    data: dict = dataclasses.field(default_factory=dict, repr=False)
    problem: str | None = None

    @property
    def ir_path(self) -> Path:
        return self.path / "kernel.ir"

    @property
    def asm_path(self) -> Path:
        return self.path / "kernel.s"

    @property
    def hsaco_path(self) -> Path:
        return self.path / "kernel.hsaco"

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"


@dataclasses.dataclass
class ClearReport:
    """What `Cache.clear` did: entries removed, other tilegcn files removed (locks, temp dirs, the LLVM
    probe memo), and what it left in place with the reason."""

    root: Path
    removed: list = dataclasses.field(default_factory=list)
    removed_other: list = dataclasses.field(default_factory=list)
    left: list = dataclasses.field(default_factory=list)  # (path, why)


Verify = Callable[[Entry], "str | None"]


class Cache:
    """The disk cache under one root (`cache_dir()` when none is given).

    `lock_timeout`: seconds to wait for another process's per-key lock (default $TILEGCN_CACHE_LOCK_TIMEOUT,
    else 600); then a CacheError names the lock and its holder.
    """

    def __init__(self, root: os.PathLike | str | None = None, create: bool = True,
                 lock_timeout: float | None = None):
        if root is None:
            self.root = cache_dir(create)
        else:
            self.root = Path(root)
            if create:
                _make_root(self.root)
            _warn_if_unsafe(self.root)
        self.lock_timeout = _lock_timeout() if lock_timeout is None else float(lock_timeout)

    def entry_dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    # -- reading ------------------------------------------------------------------------------------
    def _check(self, key: str, verify: Verify | None = None) -> tuple[Entry | None, str | None]:
        """(entry, None) when the entry is present and sound, (None, None) when absent,
        (None, reason) when present but bad."""
        path = self.entry_dir(key)
        if not path.exists():
            return None, None
        entry = _read_entry(path)
        if entry.problem is None and verify is not None:
            problem = verify(entry)
            if problem:
                return None, problem
        return (None, entry.problem) if entry.problem else (entry, None)

    def load(self, key: str, verify: Verify | None = None) -> Entry | None:
        """The verified entry for `key`, or None (a bad entry is reported with a CacheWarning).
        `verify(entry)` may add a check of its own: it returns the problem, or None."""
        entry, problem = self._check(key, verify)
        if problem:
            _warn_bad(self.entry_dir(key), problem)
        return entry

    def entries(self) -> list[Entry]:
        """Every entry tilegcn wrote under the root, each verified (`problem` set when bad; meta {} when
        unreadable), newest first."""
        out = []
        for shard in _listdir(self.root):
            if not _is_shard(shard):
                continue
            for path in _listdir(shard):
                if _KEY.fullmatch(path.name) and path.name.startswith(shard.name) and _is_real_dir(path):
                    out.append(dataclasses.replace(_read_entry(path), data={}))  # a listing keeps no bytes
        out.sort(key=lambda e: (-_created(e.meta), e.key))
        return out

    def find(self, prefix: str) -> Entry:
        """The verified entry whose key starts with `prefix` (unique); CacheError otherwise."""
        prefix = prefix.strip().lower()
        if len(prefix) < 2:
            raise CacheError("tilegcn: give at least 2 characters of the key")
        shard = self.root / prefix[:2]
        matches = [p for p in _listdir(shard) if p.name.startswith(prefix) and _KEY.fullmatch(p.name)]
        if not matches:
            raise CacheError(f"tilegcn: no cache entry {prefix!r} in {self.root}")
        if len(matches) > 1:
            raise CacheError(f"tilegcn: key prefix {prefix!r} is ambiguous: " + ", ".join(p.name for p in matches))
        entry, problem = self._check(matches[0].name)
        if entry is None:
            raise CacheError(f"tilegcn: cache entry {matches[0]} is bad: {problem}; the next compile of "
                             f"that kernel rebuilds it")
        return entry

    # -- clearing -----------------------------------------------------------------------------------
    def clear(self) -> ClearReport:
        """Remove what tilegcn wrote under the root: entries, their lock/holder files and temp dirs, the
        LLVM probe memo. Anything else (a user's file or folder, an entry folder holding foreign files, a
        symbolic link) is left and reported, as is an entry whose lock another process holds."""
        report = ClearReport(self.root)
        for item in _listdir(self.root):
            if _is_shard(item):
                self._clear_shard(item, report)
            elif item.name == PROBE_MEMO or _PROBE_TMP.fullmatch(item.name):
                _remove(item, report, report.removed_other)
            elif item.name in OTHER_OWNERS:
                report.left.append((item, OTHER_OWNERS[item.name]))
            else:
                report.left.append((item, "not written by tilegcn"))
        return report

    def _clear_shard(self, shard: Path, report: ClearReport) -> None:
        by_key: dict[str, list[Path]] = {}
        for item in _listdir(shard):
            m = _SHARD_ITEM.fullmatch(item.name)
            key = m and (m["key"] or m["key2"])
            if not key or not key.startswith(shard.name):
                report.left.append((item, "not written by tilegcn"))
            elif item.is_symlink():
                report.left.append((item, "a symbolic link (tilegcn never writes one)"))
            else:
                by_key.setdefault(key, []).append(item)
        for key, items in sorted(by_key.items()):
            self._clear_key(shard, key, items, report)
        with contextlib.suppress(OSError):
            shard.rmdir()  # only when nothing was left in it

    def _clear_key(self, shard: Path, key: str, items: list, report: ClearReport) -> None:
        lock_path = shard / f".{key}.lock"
        lock = FileLock(str(lock_path))
        lock_was_there = lock_path.exists()  # taking the lock makes the file: count only one we found
        try:
            _acquire_current(lock, lock_path, 0)
        except Timeout:
            why = f"in use: {_describe_holder(shard / f'.{key}.holder')}"
            report.left.extend((p, why) for p in items)
            return
        except OSError as e:
            report.left.extend((p, f"cannot take its lock {lock_path} ({e})") for p in items)
            return
        try:
            for item in items:
                if item.name == key:
                    self._clear_entry(item, report)
                elif item != lock_path:
                    _remove(item, report, report.removed_other)
            _remove(lock_path, report, report.removed_other if lock_was_there else [])
        finally:
            lock.release()

    def _clear_entry(self, path: Path, report: ClearReport) -> None:
        foreign = sorted(p.name for p in _listdir(path) if p.name not in FILES or not _is_real_file(p))
        if foreign:
            report.left.append((path, f"holds files tilegcn does not write: {', '.join(foreign)}"))
            return
        trash = None
        try:  # out of sight first, so that a half-done removal is never mistaken for an entry
            trash = Path(tempfile.mkdtemp(prefix=f".{path.name}{_TMP_MARK}clear-", dir=path.parent))
            os.rename(path, trash / "old")
            shutil.rmtree(trash)
        except OSError as e:
            if trash is not None and path.exists():
                with contextlib.suppress(OSError):
                    trash.rmdir()
            report.left.append((path, f"cannot remove it ({e})"))
            return
        report.removed.append(path)

    # -- writing ------------------------------------------------------------------------------------
    def get_or_build(self, key: str, build: Callable[[Path], dict],
                     verify: Verify | None = None) -> tuple[Entry, bool]:
        """(entry, built): the verified entry for `key`, building it when absent or bad.

        `build(tmp_dir)` writes kernel.ir, kernel.s and kernel.hsaco into `tmp_dir` and returns the meta
        dict (JSON-able); this adds `key`, the files' sha256 and `meta_sha256`, writes meta.json and
        publishes atomically. Any exception from `build` leaves no entry behind. `verify` as for `load`.
        """
        entry, problem = self._check(key, verify)
        if entry is not None:
            return entry, False
        shard = self.root / key[:2]
        with _writing(shard / key):
            _make_shard(shard)
        with self._key_lock(shard, key):
            entry, problem = self._check(key, verify)  # someone else may have built it meanwhile
            if entry is not None:
                return entry, False
            if problem:
                _warn_bad(self.entry_dir(key), problem)
            return self._build_locked(key, shard, build), True

    @contextlib.contextmanager
    def _key_lock(self, shard: Path, key: str):
        """Hold the per-key lock, with a record of who holds it beside it. A waiter warns once after
        LOCK_NOTICE_S and gives up after `lock_timeout` with a CacheError naming the lock and its holder."""
        lock_path, holder = shard / f".{key}.lock", shard / f".{key}.holder"
        lock = FileLock(str(lock_path))
        notice = min(LOCK_NOTICE_S, self.lock_timeout)
        with _writing(lock_path):
            try:
                _acquire_current(lock, lock_path, notice)
            except Timeout:
                if self.lock_timeout > notice:
                    warnings.warn(f"tilegcn: waiting for the cache lock {lock_path}, "
                                  f"{_describe_holder(holder)} (giving up after {self.lock_timeout:g} s; "
                                  f"{ENV_LOCK_TIMEOUT} sets that)", CacheWarning, stacklevel=5)
                try:
                    _acquire_current(lock, lock_path, self.lock_timeout - notice)
                except Timeout:
                    raise CacheError(
                        f"tilegcn: gave up after {self.lock_timeout:g} s waiting for the cache lock {lock_path}, "
                        f"{_describe_holder(holder)}. If that process is stuck, end it (its lock is released "
                        f"when it exits); to wait longer set {ENV_LOCK_TIMEOUT} (seconds)") from None
        try:
            with _writing(holder):
                _write_holder(holder)
            yield
        finally:
            with contextlib.suppress(OSError):
                holder.unlink()
            lock.release()

    def _build_locked(self, key: str, shard: Path, build: Callable[[Path], dict]) -> Entry:
        final = shard / key
        with _writing(final):
            for stale in shard.glob(f".{key}{_TMP_MARK}*"):  # left by a killed build of this key
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}{_TMP_MARK}", dir=shard))
        try:
            meta = dict(build(tmp))  # its errors (the compiler's) pass through unchanged
            with _writing(final):
                data = {}
                for name, digest_field in DIGEST_FIELDS.items():
                    if not (tmp / name).is_file():
                        raise CacheError(f"tilegcn: cache build for {key} did not write {name}")
                    data[name] = (tmp / name).read_bytes()
                    meta[digest_field] = _sha256(data[name])
                meta["key"] = key
                meta = json.loads(json.dumps(meta))  # the form a later load reads (tuples become lists)
                meta["meta_sha256"] = meta_digest(meta)
                (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
                if final.exists():  # a bad entry: move it aside atomically, then drop it
                    trash = Path(tempfile.mkdtemp(prefix=f".{key}{_TMP_MARK}bad-", dir=shard))
                    os.rename(final, trash / "old")
                    shutil.rmtree(trash, ignore_errors=True)
                os.rename(tmp, final)  # never onto an entry: that one would be moved aside above
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Entry(key, final, meta, data)


def _read_entry(path: Path) -> Entry:
    """The entry in `path`, read once and verified: `problem` says what is wrong, else None."""
    key = path.name
    try:
        meta = json.loads((path / "meta.json").read_bytes())
    except FileNotFoundError:
        return Entry(key, path, {}, problem="meta.json is missing")
    except (OSError, ValueError) as e:
        return Entry(key, path, {}, problem=f"meta.json is unreadable ({e})")
    if not isinstance(meta, dict):
        return Entry(key, path, {}, problem=f"meta.json holds a JSON {type(meta).__name__}, not an object")
    problem = _meta_problem(meta, key)
    data = {}
    for name, digest_field in DIGEST_FIELDS.items():
        if problem:
            break
        try:
            data[name] = (path / name).read_bytes()
        except FileNotFoundError:
            problem = f"{name} is missing"
        except OSError as e:
            problem = f"{name} is unreadable ({e})"
        else:
            if _sha256(data[name]) != meta.get(digest_field):
                problem = f"{name} does not match the sha256 in meta.json"
    return Entry(key, path, meta, {} if problem else data, problem)


def _meta_problem(meta: dict, key: str) -> str | None:
    if "meta_sha256" not in meta:
        return "meta.json has no meta_sha256 (written by an older tilegcn)"
    if meta["meta_sha256"] != meta_digest(meta):
        return "meta.json was modified (its content does not match its meta_sha256)"
    if meta.get("key") != key:
        return f"meta.json belongs to key {meta.get('key')!r}, not to this folder"
    return None


def _acquire_current(lock: FileLock, path: Path, timeout: float) -> None:
    """Acquire `lock` within `timeout` seconds (else filelock.Timeout), on the lock file that is at `path`
    now: `cache clear` unlinks a lock file while holding it, so a waiter that then gets the lock of the
    unlinked file must try again on the new one, or two processes would hold "the" lock."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        except FileNotFoundError:  # `cache clear` removed the emptied shard folder just now
            _make_shard(path.parent)
            continue
        if _holds_file_at(lock, path):
            return
        lock.release()
        if time.monotonic() > deadline:
            raise Timeout(str(path))


def _make_shard(shard: Path) -> None:
    """Make a shard folder. `cache clear` may remove it again at any time it is empty: `_acquire_current`
    remakes it until the lock file in it is held."""
    with contextlib.suppress(FileExistsError):  # also raised when a clear removed it mid-makedirs
        os.makedirs(shard, mode=0o700, exist_ok=True)


def _holds_file_at(lock: FileLock, path: Path) -> bool:
    fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
    if fd is None:  # a filelock without this attribute: assume the file is current
        return True
    try:
        held, now = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _lock_timeout() -> float:
    text = os.environ.get(ENV_LOCK_TIMEOUT)
    if not text:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise CacheError(f"tilegcn: {ENV_LOCK_TIMEOUT}={text!r} is not a number of seconds >= 0")
    return value


def _write_holder(path: Path) -> None:
    """Record who holds a lock (atomically: a reader sees the old record or the new one)."""
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
              "argv": " ".join(sys.argv)[:200]}
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _describe_holder(path: Path) -> str:
    """'held by pid N on HOST since TIME (state), running ARGV', from the holder record beside a lock."""
    try:
        rec = json.loads(path.read_text())
        pid, host, started = int(rec["pid"]), str(rec["host"]), float(rec["started"])
    except (OSError, ValueError, TypeError, KeyError):
        return "held by a process that left no record of itself"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    state = _process_state(pid) if host == socket.gethostname() else "on another host"
    argv = f", running {rec['argv']!r}" if rec.get("argv") else ""
    return f"held by pid {pid} on {host} since {since} ({state}){argv}"


def _process_state(pid: int) -> str:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "no longer running: the record is stale, or a process it started holds the lock"
    except PermissionError:
        return "running, as another user"
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return "running"
    return {"T": "stopped, e.g. by SIGSTOP or Ctrl-Z", "t": "stopped by a debugger",
            "Z": "exited, not yet reaped"}.get(fields[0], "running")


def _listdir(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:  # absent, not a folder, or unreadable: nothing of ours to see there
        return []


def _is_shard(path: Path) -> bool:
    return bool(_SHARD.fullmatch(path.name)) and _is_real_dir(path)


def _is_real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _is_real_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _remove(path: Path, report: ClearReport, into: list) -> None:
    try:
        shutil.rmtree(path) if _is_real_dir(path) else path.unlink()
    except FileNotFoundError:
        return
    except OSError as e:
        report.left.append((path, f"cannot remove it ({e})"))
        return
    into.append(path)


@contextlib.contextmanager
def _writing(path: Path):
    """Turn an OSError of the cache's own file work into a CacheError that says how to fix it."""
    try:
        yield
    except OSError as e:
        raise CacheError(f"tilegcn: cannot write the cache entry {path}: {e}; "
                         f"set {ENV_CACHE_DIR} to a writable folder") from e


def _created(meta: dict) -> float:
    value = meta.get("created", 0)
    return float(value) if isinstance(value, (int, float)) and value == value else 0.0


def _warn_bad(path: Path, problem: str) -> None:
    warnings.warn(f"tilegcn: cache entry {path} is bad ({problem}); rebuilding it", CacheWarning, stacklevel=4)
