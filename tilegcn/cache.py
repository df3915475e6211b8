"""Content-addressed disk cache of compiled kernels.

Layout: ``<root>/<key[:2]>/<key>/`` holding ``kernel.ir``, ``kernel.s``, ``kernel.hsaco`` and ``meta.json``;
beside each entry its lock file ``.<key>.lock`` and, while a process holds it, ``.<key>.holder`` (pid, host,
start time, command line). The root is ``$TILEGCN_CACHE_DIR``, else ``~/.tilegcn/cache``. Everything tilegcn
makes in it is private whatever the umask (folders 0700, files 0600); a root another user can write (group or
world-writable, or owned by someone else) is not used: like ssh with a key others can write, tilegcn warns
(`CacheWarning`) and caches in a private temporary folder for the rest of the process.

The key (`make_key`) is a sha256 over everything that decides the bytes of the code object and nothing
else: the tilegcn version, a hash of the compiler's own sources, the canonical IR text, the arch, the
compile options and the LLVM version. Nothing process-dependent (ids, temp paths, dict order) enters it.

Writes are atomic: an entry is built in a temp dir beside it and published with one ``os.rename``;
a ``filelock`` per key makes concurrent processes build it once. A waiter gives up after
``$TILEGCN_CACHE_LOCK_TIMEOUT`` seconds with a CacheError naming the lock and its holder; a lock whose
holder died is free at once (the kernel drops a dead process's ``flock``).

Loads verify the whole entry before anything in it is used: ``meta.json`` records the sha256 of the
three other files and of its own canonical content (``meta_sha256``), the key it belongs to, and an HMAC of
all that (``meta_hmac``) under a random per-cache secret (``.hmac-key``, 0600): an entry whose files were
swapped and digests recomputed, or one copied from another cache, is not loaded. Every file is read with a
size limit (`read_limited`), never through a symbolic link; the
caller may add its own check (the jit compares kernel.ir with the IR it traced and the launch fields
with the traced kernel). A verified `Entry` holds the bytes it verified, so nothing is re-read from disk
later. A bad entry is rebuilt with a `CacheWarning`, never a crash.

With ``$TILEGCN_REMOTE_CACHE`` (a Redis URL, `remote_cache.py`) a miss here asks the fleet's shared cache;
what it serves is verified (`_remote_entry_problem`, then the caller's check) and written through, signed
with this cache's key; a local build is published to it. A hit here never asks it.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import socket
import stat
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

from filelock import FileLock, Timeout

from . import __version__, remote_cache
from .errors import CacheError
from .options import CompileOptions

ENV_CACHE_DIR = "TILEGCN_CACHE_DIR"
ENV_LOCK_TIMEOUT = "TILEGCN_CACHE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 600.0
LOCK_NOTICE_S = 5.0  # a waiter says who it waits for after this long, then keeps waiting
FILES = ("kernel.ir", "kernel.s", "kernel.hsaco", "meta.json")
DIGEST_FIELDS = {"kernel.ir": "ir_sha256", "kernel.s": "asm_sha256", "kernel.hsaco": "hsaco_sha256"}
PROBE_MEMO = "llvm-probe.json"  # toolchain.py's memo of LLVM probes, kept in the root
SECRET_FILE = ".hmac-key"  # the per-cache secret that signs meta.json and the probe memo (see cache_secret)
# The most tilegcn reads of each file it wrote: far above what it writes (a GEMM's kernel.s is ~30 KiB), far
# below what would exhaust memory when a file was replaced by a huge one or a link to /dev/zero.
ENTRY_FILE_LIMIT = 64 << 20  # kernel.ir, kernel.s, kernel.hsaco
SMALL_FILE_LIMIT = 4 << 20  # meta.json, llvm-probe.json, holder records, tuning records
# other tilegcn data in the root that `clear` leaves to its own command
OTHER_OWNERS = {"tune": "autotuning results: `python -m tilegcn tune clear` removes them"}
_PACKAGE_DIR = Path(__file__).resolve().parent
_TMP_MARK = ".tmp-"
_KEY = re.compile(r"[0-9a-f]{64}")
_SHARD = re.compile(r"[0-9a-f]{2}")
# what tilegcn writes inside a shard, by name: the entry, its lock, its holder record, its temp dirs
_SHARD_ITEM = re.compile(r"(?P<key>[0-9a-f]{64})|\.(?P<key2>[0-9a-f]{64})(?P<kind>\.lock|\.holder(\.\d+)?|\.tmp-.*)")
_PROBE_TMP = re.compile(re.escape(PROBE_MEMO) + r"\.\d+\.tmp")
_SECRET_TMP = re.compile(re.escape(SECRET_FILE) + r"\.\d+\.tmp")


class CacheWarning(UserWarning):
    """A cache entry was unreadable or corrupted and is being rebuilt, the cache root is unsafe, or a
    process waits for another one's cache lock."""


def cache_dir(create: bool = True) -> Path:
    """The cache root: $TILEGCN_CACHE_DIR, else ~/.tilegcn/cache (made with mode 0700 when `create`); a
    private temporary folder instead when that root is unsafe (see `safe_root`)."""
    env = os.environ.get(ENV_CACHE_DIR)
    root = Path(env).expanduser() if env else Path.home() / ".tilegcn" / "cache"
    if create:
        _make_root(root)
    return safe_root(root)


def _make_root(root: Path) -> None:
    try:
        make_private_dirs(root)
    except OSError as e:
        raise CacheError(f"tilegcn: cannot create the cache dir {root}: {e}; "
                         f"set {ENV_CACHE_DIR} to a writable folder") from e


def make_private_dirs(path: Path) -> None:
    """`os.makedirs` with mode 0700 for every folder it makes, not only the last (whatever the umask:
    a 0777 ~/.tilegcn would let others swap the cache folder under it)."""
    missing, target = [], path
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            os.mkdir(folder, 0o700)
    if not os.path.isdir(target):
        raise NotADirectoryError(errno.ENOTDIR, "it exists and is not a folder", str(target))


def unsafe_problems(st: os.stat_result) -> list:
    """Why a folder or file with this stat could be written by another user: [] when it cannot."""
    problems = []
    if st.st_mode & 0o022:
        problems.append(f"it is writable by others (mode {st.st_mode & 0o7777:04o})")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        problems.append(f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()})")
    return problems


_warned_roots: set = set()
_fallback: list = []  # the private temporary root of this process, made on first need


def safe_root(root: Path) -> Path:
    """`root`, unless another user could plant a code object in it (group/world-writable, or owned by
    someone else): then, as ssh ignores a key others can write, a private temporary folder for the rest of
    this process, with a CacheWarning (once per root) naming the problem and the fix."""
    try:
        problems = unsafe_problems(os.stat(root))
    except OSError:
        return root  # absent (made 0700 when first written), or unreadable: its use says so
    if not problems:
        return root
    if not _fallback:
        _fallback.append(Path(tempfile.mkdtemp(prefix="tilegcn-cache-")))  # 0700, ours
        atexit.register(shutil.rmtree, _fallback[0], True)
    if (str(root), tuple(problems)) not in _warned_roots:
        _warned_roots.add((str(root), tuple(problems)))
        warnings.warn(
            f"tilegcn: the cache dir {root} is unsafe: {'; '.join(problems)}, so another user could plant "
            f"a kernel in it. tilegcn does not use it and caches in the private temporary folder "
            f"{_fallback[0]} for this process instead. Fix: chmod 700 {root} (as its owner; chown it to you "
            f"if someone else owns it), or set {ENV_CACHE_DIR} to a folder only you can write",
            CacheWarning, stacklevel=4)
    return _fallback[0]


class UnreadableFileError(CacheError, OSError):
    """A file tilegcn reads is a symbolic link, not a regular file, or larger than tilegcn ever writes it.
    Also an OSError, so code that handles an unreadable file handles this one."""


def read_limited(path: os.PathLike | str, limit: int, follow_symlinks: bool = False) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them: UnreadableFileError when it is a
    symbolic link (unless `follow_symlinks`), not a regular file (a FIFO, /dev/zero) or longer than `limit`,
    so a replaced file can neither block nor exhaust memory. Other OSErrors (FileNotFoundError ...) pass."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # NONBLOCK: opening a FIFO must not wait
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise UnreadableFileError(f"{path} is a symbolic link; tilegcn never writes one and does not "
                                      "follow it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFileError(f"{path} is not a regular file (mode {st.st_mode:o})")
        chunks, size = [], 0
        while size <= limit:  # a file may grow after fstat: never read past limit + 1
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UnreadableFileError(f"{path} is larger than the {limit} bytes tilegcn reads of it")
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_private(path: os.PathLike | str, data: bytes) -> None:
    """Write `data` to the new file `path` with mode 0600 whatever the umask. It must not exist: whatever
    is there (a link planted to make tilegcn overwrite another file) makes this raise FileExistsError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)  # a umask such as 0o400 would take even the owner's bits
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def replace_private(path: Path, data: bytes) -> None:
    """Atomically replace `path` with a 0600 file holding `data` (readers see the old or the new file)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a killed process with our pid; unlinking a planted link is harmless
    try:
        write_private(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# -- the per-cache secret ---------------------------------------------------------------------------------
# Why an HMAC rather than re-assembling kernel.s on a process's first load: assembling costs 35-45 ms per
# kernel (most of a cold compile), the HMAC ~10 us; and a secret in a 0600 file of a 0700 root binds the
# entry's digests to this cache, so an entry edited with recomputed digests, or copied from another cache, fails.
_secrets: dict = {}  # str(root) -> ((st_dev, st_ino, st_mtime_ns) of the key file, secret)
SECRET_BYTES = 32


def cache_secret(root: Path) -> bytes:
    """The random secret of the cache under `root` (made on first use). CacheError when it cannot be
    read or made. A key file others could read or write, or of the wrong size, is replaced (with a
    CacheWarning): entries signed with the old one are rebuilt."""
    path = Path(root) / SECRET_FILE
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise CacheError(f"tilegcn: cannot read the cache's key file {path}: {e}") from None
    ident = st and (st.st_dev, st.st_ino, st.st_mtime_ns)
    memo = _secrets.get(str(root))
    if memo is not None and memo[0] == ident:
        return memo[1]  # the warm case of a cold load: one lstat
    try:
        secret = _read_or_make_secret(path)
        st = os.lstat(path)
    except OSError as e:
        raise CacheError(f"tilegcn: cannot read or make the cache's key file {path}: {e}; "
                         f"set {ENV_CACHE_DIR} to a writable folder") from None
    _secrets[str(root)] = ((st.st_dev, st.st_ino, st.st_mtime_ns), secret)
    return secret


def _read_or_make_secret(path: Path) -> bytes:
    for _ in range(3):
        try:
            secret = read_limited(path, 4096)
        except FileNotFoundError:
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            write_private(tmp, secrets.token_bytes(SECRET_BYTES))
            try:
                os.link(tmp, path)  # never replaces one another process made meanwhile: read that one
            except FileExistsError:
                pass
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            continue
        except UnreadableFileError as e:
            problem = str(e)
        else:
            st = os.lstat(path)
            problem = ("; ".join(unsafe_problems(st)) or ("it is readable by others" if st.st_mode & 0o044 else "")
                       or (f"it holds {len(secret)} bytes, not {SECRET_BYTES}" if len(secret) != SECRET_BYTES else ""))
            if not problem:
                return secret
        warnings.warn(f"tilegcn: the cache's key file {path} is unsafe or damaged ({problem}); making a new "
                      "one: entries signed with the old one are rebuilt", CacheWarning, stacklevel=6)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a link or a foreign file: only the name goes, never what it points to
    raise CacheError(f"tilegcn: cannot settle the cache's key file {path} (it keeps changing)")


def sign(root: Path, body: dict) -> str:
    """HMAC-SHA256 of `body`'s canonical JSON under the cache's secret (hex)."""
    blob = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(cache_secret(root), blob, hashlib.sha256).hexdigest()


def signed_by(root: Path, body: dict, mac) -> bool:
    return isinstance(mac, str) and hmac.compare_digest(sign(root, body), mac)


def save_signed(path: Path, payload) -> None:
    """Write {"payload": payload, "hmac": ...} to `path` atomically, 0600 (see `load_signed`)."""
    body = {"payload": json.loads(json.dumps(payload))}  # what a load reads back (tuples become lists)
    body["hmac"] = sign(path.parent, body)
    replace_private(path, json.dumps(body, sort_keys=True).encode())


def load_signed(path: Path, limit: int = SMALL_FILE_LIMIT):
    """The payload `save_signed` wrote to `path`, read with `limit` and checked against this cache's secret.
    FileNotFoundError when absent; UnreadableFileError naming the problem when it is anything else."""
    try:
        body = json.loads(read_limited(path, limit))
    except ValueError as e:
        raise UnreadableFileError(f"{path} is not JSON ({e})") from None
    if not isinstance(body, dict) or "payload" not in body:
        raise UnreadableFileError(f"{path} is not a file tilegcn wrote")
    if not signed_by(path.parent, {"payload": body["payload"]}, body.get("hmac")):
        raise UnreadableFileError(f"{path} is not signed with this cache's key (edited, or from another cache)")
    return body["payload"]


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


def make_key(ir: str, options: CompileOptions, llvm_version: str) -> str:
    """The cache key of one compile: tilegcn's version and sources, the IR, every field of the CompileOptions
    (arch, schedule, copy, ...) and the LLVM that assembles it."""
    blob = json.dumps(
        {
            "tilegcn": __version__,
            "compiler": compiler_hash(),
            "ir": ir,
            "options": options.key_fields(),
            "llvm": llvm_version,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def meta_digest(meta: dict) -> str:
    """sha256 of meta.json's canonical content (sorted keys, compact), `meta_sha256` and `meta_hmac` left out."""
    body = {k: v for k, v in meta.items() if k not in ("meta_sha256", "meta_hmac")}
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
    fetched: bool = False  # copied from the remote cache ($TILEGCN_REMOTE_CACHE) just now

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
            if create:
                _make_root(Path(root))
            self.root = safe_root(Path(root))
        self.lock_timeout = _lock_timeout() if lock_timeout is None else float(lock_timeout)

    def entry_dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    # -- reading ------------------------------------------------------------------------------------
    def _check(self, key: str, verify: Verify | None = None) -> tuple[Entry | None, str | None]:
        """(entry, None) when the entry is present and sound, (None, None) when absent,
        (None, reason) when present but bad."""
        path = self.entry_dir(key)
        for link in (path.parent, path):  # a shard that is a link would also receive new entries
            try:
                is_link = stat.S_ISLNK(os.lstat(link).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                return None, None
            except OSError as e:
                raise self._unreadable(link, e) from None
            if is_link:
                raise CacheError(
                    f"tilegcn: {link} is a symbolic link: tilegcn never writes one there, so it does not load "
                    f"through it (another program or user may have planted it). Remove it (rm {link}) and run "
                    f"again, or set {ENV_CACHE_DIR} to another folder")
        entry = _read_entry(path, self.root)
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

    def _unreadable(self, path: Path, error: OSError) -> CacheError:
        return CacheError(f"tilegcn: cannot read the cache dir {self.root} ({path}: {error}); fix its "
                          f"permissions (chmod 700 {self.root}, as its owner) or set {ENV_CACHE_DIR} to "
                          "another folder")

    def _root_items(self) -> list[Path]:
        """The root's items ([] when absent); CacheError when it cannot be read (never "0 entries")."""
        try:
            return sorted(self.root.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise self._unreadable(self.root, e) from None

    def entries(self) -> list[Entry]:
        """Every entry tilegcn wrote under the root, each verified (`problem` set when bad; meta {} when
        unreadable), newest first."""
        out = []
        for shard in self._root_items():
            if not _is_shard(shard):
                continue
            for path in _listdir(shard):
                if _KEY.fullmatch(path.name) and path.name.startswith(shard.name) and _is_real_dir(path):
                    out.append(dataclasses.replace(_read_entry(path, self.root), data={}))  # a listing keeps no bytes
        out.sort(key=lambda e: (-_created(e.meta), e.key))
        return out

    def find(self, prefix: str) -> Entry:
        """The verified entry whose key starts with `prefix` (unique); CacheError otherwise."""
        prefix = prefix.strip().lower()
        if len(prefix) < 2:
            raise CacheError("tilegcn: give at least 2 characters of the key")
        shard = self.root / prefix[:2]
        self._root_items()  # an unreadable root is named, not "no cache entry"
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
        LLVM probe memo (the cache's key file stays, unreported). Anything else (a user's file or folder,
        an entry folder holding foreign files, a symbolic link) is left and reported, as is an entry whose
        lock another process holds."""
        report = ClearReport(self.root)
        for item in self._root_items():
            if _is_shard(item):
                self._clear_shard(item, report)
            elif item.name == PROBE_MEMO or _PROBE_TMP.fullmatch(item.name):
                _remove(item, report, report.removed_other)
            elif item.name == SECRET_FILE or _SECRET_TMP.fullmatch(item.name):
                continue  # the cache's key stays: entries that processes are signing now stay valid
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
        lock = FileLock(str(lock_path), mode=0o600)
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
            if not remote_cache.configured():
                return self._build_locked(key, shard, build), True
            remote = remote_cache.store()
            entry = self._from_remote(remote, key, shard, verify)
            if entry is not None:
                return entry, False
            entry = self._build_locked(key, shard, build)
            remote.publish_entry(key, _publishable(entry))
            return entry, True

    def _from_remote(self, remote, key: str, shard: Path, verify: Verify | None) -> Entry | None:
        """The remote cache's entry for `key`, verified (`_remote_entry_problem`, then `verify`) before any
        byte of it is used, then written through to this cache and signed with its key; None when the
        remote has none, or a bad one (with a CacheWarning: the local build then replaces it)."""
        files = remote.fetch_entry(key)
        if files is None:
            return None
        problem, meta = _remote_entry_problem(key, files)
        if problem is None and verify is not None:
            problem = verify(Entry(key, self.entry_dir(key), meta, {n: files[n] for n in DIGEST_FIELDS}))
        if problem:
            warnings.warn(f"tilegcn: the remote cache {remote.url} holds a bad entry for {key} ({problem}); "
                          "building it here, which replaces it", CacheWarning, stacklevel=5)
            return None

        def write_through(tmp: Path) -> dict:
            for name in DIGEST_FIELDS:
                write_private(tmp / name, files[name])
            kept = {k: v for k, v in meta.items() if k not in _RECOMPUTED}
            kept.update(origin="remote", remote={"url": remote.url, "fetched": time.time()})
            return kept

        return dataclasses.replace(self._build_locked(key, shard, write_through), fetched=True)

    @contextlib.contextmanager
    def _key_lock(self, shard: Path, key: str):
        """Hold the per-key lock, with a record of who holds it beside it. A waiter warns once after
        LOCK_NOTICE_S and gives up after `lock_timeout` with a CacheError naming the lock and its holder."""
        lock_path, holder = shard / f".{key}.lock", shard / f".{key}.holder"
        lock = FileLock(str(lock_path), mode=0o600)
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
            with _writing(final, only_full_disk=True):  # the compiler's own errors pass unchanged
                meta = dict(build(tmp))
            with _writing(final):
                data = {}
                for name, digest_field in DIGEST_FIELDS.items():
                    if not (tmp / name).is_file():
                        raise CacheError(f"tilegcn: cache build for {key} did not write {name}")
                    os.chmod(tmp / name, 0o600)  # build() wrote it under the umask
                    data[name] = read_limited(tmp / name, ENTRY_FILE_LIMIT)
                    meta[digest_field] = _sha256(data[name])
                meta["key"] = key
                meta = json.loads(json.dumps(meta))  # the form a later load reads (tuples become lists)
                meta["meta_sha256"] = meta_digest(meta)
                meta["meta_hmac"] = sign(self.root, _unsigned(meta))
                write_private(tmp / "meta.json", (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())
                if final.exists():  # a bad entry: move it aside atomically, then drop it
                    trash = Path(tempfile.mkdtemp(prefix=f".{key}{_TMP_MARK}bad-", dir=shard))
                    os.rename(final, trash / "old")
                    shutil.rmtree(trash, ignore_errors=True)
                os.rename(tmp, final)  # never onto an entry: that one would be moved aside above
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Entry(key, final, meta, data)


def _read_entry(path: Path, root: Path) -> Entry:
    """The entry in `path`, read once and verified: `problem` says what is wrong, else None."""
    key = path.name
    try:
        meta = json.loads(read_limited(path / "meta.json", SMALL_FILE_LIMIT))
    except FileNotFoundError:
        return Entry(key, path, {}, problem="meta.json is missing")
    except (OSError, ValueError) as e:
        return Entry(key, path, {}, problem=f"meta.json is unreadable ({e})")
    if not isinstance(meta, dict):
        return Entry(key, path, {}, problem=f"meta.json holds a JSON {type(meta).__name__}, not an object")
    problem = _meta_problem(meta, key, root)
    data = {}
    for name, digest_field in DIGEST_FIELDS.items():
        if problem:
            break
        try:
            data[name] = read_limited(path / name, ENTRY_FILE_LIMIT)
        except FileNotFoundError:
            problem = f"{name} is missing"
        except OSError as e:
            problem = f"{name} is unreadable ({e})"
        else:
            if _sha256(data[name]) != meta.get(digest_field):
                problem = f"{name} does not match the sha256 in meta.json"
    return Entry(key, path, meta, {} if problem else data, problem)


def _meta_problem(meta: dict, key: str, root: Path) -> str | None:
    if "meta_sha256" not in meta or "meta_hmac" not in meta:
        return "meta.json has no meta_sha256 or meta_hmac (written by an older tilegcn)"
    if meta["meta_sha256"] != meta_digest(meta):
        return "meta.json was modified (its content does not match its meta_sha256)"
    if meta.get("key") != key:
        return f"meta.json belongs to key {meta.get('key')!r}, not to this folder"
    try:
        signed = signed_by(root, _unsigned(meta), meta["meta_hmac"])
    except CacheError as e:
        return str(e)
    if not signed:
        return ("meta.json is not signed with this cache's key: the entry was edited (its digests recomputed) "
                "or copied from another cache")
    return None


# what a write-through recomputes rather than copies from a remote entry
_RECOMPUTED = ("key", "meta_sha256", "meta_hmac", *DIGEST_FIELDS.values())
_ELF_AMDGPU = (b"\x7fELF\x02\x01", 0xE0)  # 64-bit little-endian ELF header start; e_machine EM_AMDGPU


def _remote_entry_problem(key: str, files: dict) -> tuple[str | None, dict]:
    """(problem or None, meta) of an entry fetched from the remote cache. It cannot carry this cache's HMAC,
    so it must prove what it can: every file present and within the size limits, meta.json an object
    matching its own meta_sha256 and recording `key`, each file matching its sha256 in meta.json, and the
    files parse (UTF-8 text, an AMDGPU ELF code object). The caller's `verify` then binds it to the kernel
    being compiled (the jit: kernel.ir is the very IR this key was made from, the launch fields match)."""
    missing = [n for n in FILES if not isinstance(files.get(n), bytes)]
    if missing:
        return f"it lacks {', '.join(missing)}", {}
    for name in FILES:
        limit = SMALL_FILE_LIMIT if name == "meta.json" else ENTRY_FILE_LIMIT
        if len(files[name]) > limit:
            return f"its {name} is larger than the {limit} bytes tilegcn reads of it", {}
    try:
        meta = json.loads(files["meta.json"])
    except ValueError as e:
        return f"its meta.json is not JSON ({e})", {}
    if not isinstance(meta, dict):
        return "its meta.json is not a JSON object", {}
    if meta.get("meta_sha256") != meta_digest(meta):
        return "its meta.json does not match its meta_sha256", meta
    if meta.get("key") != key:
        return f"its meta.json belongs to key {meta.get('key')!r}", meta
    for name, digest_field in DIGEST_FIELDS.items():
        if _sha256(files[name]) != meta.get(digest_field):
            return f"its {name} does not match the sha256 in its meta.json", meta
    for name in ("kernel.ir", "kernel.s"):
        try:
            files[name].decode()
        except UnicodeDecodeError:
            return f"its {name} is not UTF-8 text", meta
    hsaco = files["kernel.hsaco"]
    machine = int.from_bytes(hsaco[18:20], "little")
    if len(hsaco) < 64 or not hsaco.startswith(_ELF_AMDGPU[0]) or machine != _ELF_AMDGPU[1]:
        return "its kernel.hsaco is not an AMDGPU code object", meta
    return None, meta


def _publishable(entry: Entry) -> dict:
    """The files of a verified entry as the remote cache stores them: meta.json without this cache's HMAC
    (no other cache can check it; meta_sha256 stays valid, it leaves the HMAC out)."""
    meta = _unsigned(entry.meta)
    return {**entry.data, "meta.json": (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode()}


def _unsigned(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k != "meta_hmac"}


def _acquire_current(lock: FileLock, path: Path, timeout: float) -> None:
    """Acquire `lock` within `timeout` seconds (else filelock.Timeout), on the lock file that is at `path`
    now: `cache clear` unlinks a lock file while holding it, so a waiter that then gets the lock of the
    unlinked file must try again on the new one, or two processes would hold "the" lock."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        # `cache clear` removed the emptied shard folder just now, or mid-way through filelock's own
        # mkdir(exist_ok=True) of it (which then raises FileExistsError)
        except (FileNotFoundError, FileExistsError):
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
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a stale one, or a link planted there: only the name goes
    write_private(tmp, json.dumps(record).encode())  # O_EXCL | O_NOFOLLOW: never writes through a link
    os.replace(tmp, path)


def _describe_holder(path: Path) -> str:
    """'held by pid N on HOST since TIME (state), running ARGV', from the holder record beside a lock."""
    try:
        rec = json.loads(read_limited(path, SMALL_FILE_LIMIT))
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


_FULL = {errno.ENOSPC: "the disk is full: free some space", errno.EDQUOT: "your disk quota is used up: free some",
         errno.EFBIG: "a file size limit stopped the write (`ulimit -f`): raise it"}


@contextlib.contextmanager
def _writing(path: Path, only_full_disk: bool = False):
    """Turn an OSError of the cache's own file work into a CacheError that says how to fix it.
    `only_full_disk`: around a caller's build(), whose other OSErrors are its own."""
    try:
        yield
    except OSError as e:
        if only_full_disk and e.errno not in _FULL:
            raise
        how = _FULL.get(e.errno, "fix its permissions")
        raise CacheError(f"tilegcn: cannot write the cache entry {path}: {e}; {how}, or set {ENV_CACHE_DIR} "
                         "to a writable folder with room") from e


def _created(meta: dict) -> float:
    value = meta.get("created", 0)
    return float(value) if isinstance(value, (int, float)) and value == value else 0.0


def _warn_bad(path: Path, problem: str) -> None:
    warnings.warn(f"tilegcn: cache entry {path} is bad ({problem}); rebuilding it", CacheWarning, stacklevel=4)


# -- hand-edited assembly in place of an entry's ($TILEGCN_ASM_OVERRIDE; see tilegcn/asm_override.py) -------------
# Which code runs for a key is the cache's concern: jit asks here, so that it never imports the override module.
ENV_ASM_OVERRIDE = "TILEGCN_ASM_OVERRIDE"


class AsmOverrideWarning(UserWarning):
    """A kernel runs a hand-edited assembly file from $TILEGCN_ASM_OVERRIDE, or such a file is unsafe and
    is not used."""


_warned: set = set()  # (key, path, why): each notice once per process


def announce_override(ident: tuple, message: str, stacklevel: int = 4) -> None:
    """Warn (AsmOverrideWarning) once per process per `ident`."""
    if ident not in _warned:
        _warned.add(ident)
        warnings.warn(message, AsmOverrideWarning, stacklevel=stacklevel)


def override_file(key: str) -> Path | None:
    """The real path of $TILEGCN_ASM_OVERRIDE/<cache key>.s when the variable is set, the file exists and
    it is safe (see tilegcn/asm_override.py); an unsafe one is not used, with an AsmOverrideWarning naming why."""
    folder = os.environ.get(ENV_ASM_OVERRIDE)
    if not folder:
        return None
    path = Path(folder) / f"{key}.s"
    if not os.path.lexists(path):
        return None
    problem = _override_problem(Path(folder), path)
    if problem:
        announce_override((key, str(path), problem),
                          f"tilegcn: {ENV_ASM_OVERRIDE}: not using {path}: {problem}, so another user could choose "
                          f"the code your kernel runs; the generated code runs. Fix: chmod go-w (and chown to you) "
                          f"the folder and the file, and keep the file itself in the folder")
        return None
    return Path(os.path.realpath(path))


def _override_problem(folder: Path, path: Path) -> str | None:
    """Why the override file `path` in `folder` is unsafe, or None (the cache root's rules)."""
    try:
        real_folder = os.path.realpath(folder)
        problems = [f"the folder {folder}: {p}" for p in unsafe_problems(os.stat(real_folder))]
        real = os.path.realpath(path)
        if os.path.dirname(real) != real_folder:
            problems.append(f"it is a symbolic link leading out of the folder (to {real})")
        st = os.stat(real)
    except OSError as e:
        return f"cannot check it ({e})"
    if not stat.S_ISREG(st.st_mode):
        problems.append("it is not a regular file")
    problems += [f"the file: {p}" for p in unsafe_problems(st)]
    return "; ".join(problems) or None
