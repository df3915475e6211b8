"""Content-addressed disk cache of compiled kernels.

Layout: ``<root>/<key[:2]>/<key>/`` holding ``kernel.ir``, ``kernel.s``, ``kernel.hsaco`` and ``meta.json``.
The root is ``$TILEGCN_CACHE_DIR``, else ``~/.tilegcn/cache`` (created with mode 0700).

The key (`make_key`) is a sha256 over everything that decides the bytes of the code object and nothing
else: the tilegcn version, a hash of the compiler's own sources, the canonical IR text, the arch, the
compile options and the LLVM version. Nothing process-dependent (ids, temp paths, dict order) enters it.

Writes are atomic: an entry is built in a temp dir beside it and published with one ``os.rename``;
a ``filelock`` per key makes concurrent processes build it once. Loads verify the sha256 of
``kernel.hsaco`` recorded in ``meta.json``; a bad entry is rebuilt with a `CacheWarning`, never a crash.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from filelock import FileLock

from . import __version__
from .errors import CacheError

ENV_CACHE_DIR = "TILEGCN_CACHE_DIR"
FILES = ("kernel.ir", "kernel.s", "kernel.hsaco", "meta.json")
_PACKAGE_DIR = Path(__file__).resolve().parent
_TMP_MARK = ".tmp-"


class CacheWarning(UserWarning):
    """A cache entry was unreadable or corrupted and is being rebuilt."""


def cache_dir(create: bool = True) -> Path:
    """The cache root: $TILEGCN_CACHE_DIR, else ~/.tilegcn/cache (made with mode 0700 when `create`)."""
    env = os.environ.get(ENV_CACHE_DIR)
    root = Path(env).expanduser() if env else Path.home() / ".tilegcn" / "cache"
    if create:
        _make_root(root)
    return root


def _make_root(root: Path) -> None:
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
    except OSError as e:
        raise CacheError(f"tilegcn: cannot create the cache dir {root}: {e}; "
                         f"set {ENV_CACHE_DIR} to a writable folder") from e


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


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Entry:
    """A published, verified cache entry."""

    key: str
    path: Path
    meta: dict

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


class Cache:
    """The disk cache under one root (`cache_dir()` when none is given)."""

    def __init__(self, root: os.PathLike | str | None = None, create: bool = True):
        if root is None:
            self.root = cache_dir(create)
        else:
            self.root = Path(root)
            if create:
                _make_root(self.root)

    def entry_dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    # -- reading ------------------------------------------------------------------------------------
    def _check(self, key: str) -> tuple[Entry | None, str | None]:
        """(entry, None) when the entry is present and sound, (None, None) when absent,
        (None, reason) when present but bad."""
        path = self.entry_dir(key)
        if not path.exists():
            return None, None
        try:
            meta = json.loads((path / "meta.json").read_text())
        except FileNotFoundError:
            return None, "meta.json is missing"
        except (OSError, ValueError) as e:
            return None, f"meta.json is unreadable ({e})"
        if not isinstance(meta, dict) or "hsaco_sha256" not in meta:
            return None, "meta.json has no hsaco_sha256"
        for name in FILES:
            if not (path / name).is_file():
                return None, f"{name} is missing"
        try:
            digest = _sha256_file(path / "kernel.hsaco")
        except OSError as e:
            return None, f"kernel.hsaco is unreadable ({e})"
        if digest != meta["hsaco_sha256"]:
            return None, "kernel.hsaco does not match the sha256 in meta.json"
        return Entry(key, path, meta), None

    def load(self, key: str) -> Entry | None:
        """The verified entry for `key`, or None (a bad entry is reported with a CacheWarning)."""
        entry, problem = self._check(key)
        if problem:
            _warn_bad(self.entry_dir(key), problem)
        return entry

    def entries(self) -> list[Entry]:
        """Every published entry (not verified; meta {} where meta.json is unreadable), newest first."""
        out = []
        if not self.root.is_dir():
            return out
        for shard in sorted(self.root.iterdir()):
            if not shard.is_dir() or len(shard.name) != 2:
                continue
            for path in sorted(shard.iterdir()):
                if not path.is_dir() or path.name.startswith("."):
                    continue
                try:
                    meta = json.loads((path / "meta.json").read_text())
                except (OSError, ValueError):
                    meta = {}
                out.append(Entry(path.name, path, meta))
        out.sort(key=lambda e: (-_created(e.meta), e.key))
        return out

    def find(self, prefix: str) -> Entry:
        """The entry whose key starts with `prefix` (unique); CacheError otherwise."""
        prefix = prefix.strip().lower()
        if len(prefix) < 2:
            raise CacheError("tilegcn: give at least 2 characters of the key")
        shard = self.root / prefix[:2]
        matches = sorted(p for p in shard.glob(prefix + "*") if p.is_dir() and not p.name.startswith(".")) \
            if shard.is_dir() else []
        if not matches:
            raise CacheError(f"tilegcn: no cache entry {prefix!r} in {self.root}")
        if len(matches) > 1:
            raise CacheError(f"tilegcn: key prefix {prefix!r} is ambiguous: " + ", ".join(p.name for p in matches))
        entry, problem = self._check(matches[0].name)
        if entry is None:
            raise CacheError(f"tilegcn: cache entry {matches[0]} is bad: {problem}")
        return entry

    def clear(self) -> int:
        """Remove every entry (and stray temp dirs and locks); the number of entries removed."""
        n = len(self.entries())
        if self.root.is_dir():
            for shard in self.root.iterdir():
                if shard.is_dir() and len(shard.name) == 2:
                    shutil.rmtree(shard, ignore_errors=True)
        return n

    # -- writing ------------------------------------------------------------------------------------
    def get_or_build(self, key: str, build: Callable[[Path], dict]) -> tuple[Entry, bool]:
        """(entry, built): the verified entry for `key`, building it when absent or bad.

        `build(tmp_dir)` writes kernel.ir, kernel.s and kernel.hsaco into `tmp_dir` and returns the meta
        dict (JSON-able); this adds `key` and `hsaco_sha256`, writes meta.json and publishes atomically.
        Any exception from `build` leaves no entry behind.
        """
        entry, problem = self._check(key)
        if entry is not None:
            return entry, False
        shard = self.root / key[:2]
        with _writing(shard / key):
            os.makedirs(shard, mode=0o700, exist_ok=True)
            lock = FileLock(str(shard / f".{key}.lock"))
            lock.acquire()
        try:
            entry, problem = self._check(key)  # someone else may have built it meanwhile
            if entry is not None:
                return entry, False
            if problem:
                _warn_bad(self.entry_dir(key), problem)
            return self._build_locked(key, shard, build), True
        finally:
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
                for name in FILES[:3]:
                    if not (tmp / name).is_file():
                        raise CacheError(f"tilegcn: cache build for {key} did not write {name}")
                meta["key"] = key
                meta["hsaco_sha256"] = _sha256_file(tmp / "kernel.hsaco")
                (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
                if final.exists():  # a bad entry: move it aside atomically, then drop it
                    trash = Path(tempfile.mkdtemp(prefix=f".{key}{_TMP_MARK}bad-", dir=shard))
                    os.rename(final, trash / "old")
                    shutil.rmtree(trash, ignore_errors=True)
                os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Entry(key, final, meta)


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
    return float(value) if isinstance(value, (int, float)) else 0.0


def _warn_bad(path: Path, problem: str) -> None:
    warnings.warn(f"tilegcn: cache entry {path} is bad ({problem}); rebuilding it", CacheWarning, stacklevel=4)
